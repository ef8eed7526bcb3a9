"""`nlp.pipe(n_process=2)`: used to hang (the parent's OpenMP threads do not survive the fork); now the
same layers as one process, for the shipped model, a model by path, and a pipeline from spacy.load. With
the onnxruntime runtime, a second call used to hang (a worker freeing the ONNX Runtime session it
inherited); now any number of calls give the one-process layers.

Each runs in a subprocess under a timeout, so that a hang fails the test instead of stalling the suite."""

import json
import os
import signal
import subprocess
import sys

import pytest

from fixture_paths import ELMO_FIXTURE

pytestmark = pytest.mark.slow  # starts a process that forks workers


SCRIPT = r"""
import json, sys
import numpy, spacy, torch

texts = [f"Sentence number {i} talks about the bank of the river. And money {i}." for i in range(60)] + ["", "x"]


def compare(nlp):
    one = [d._.elmo_layers for d in nlp.pipe(texts, batch_size=16)]  # the parent runs torch first
    two = [d._.elmo_layers for d in nlp.pipe(texts, batch_size=16, n_process=2)]
    return len(one) == len(two) and all(numpy.array_equal(a, b) for a, b in zip(one, two))


def build(path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"model": {"path": path}})
    return nlp


threads = torch.get_num_threads()
results = {"shipped": compare(build("")), "path": compare(build(sys.argv[1]))}
build(sys.argv[1]).to_disk(sys.argv[2])
results["spacy.load"] = compare(spacy.load(sys.argv[2]))
results["parent threads kept"] = torch.get_num_threads() == threads
print(json.dumps(results))
"""


def run_script(script: str, *args: str, timeout: float = 240) -> dict:
    """Run `script` in a new process group, return the JSON it printed last; fail if it hung."""
    return run_script_with_stderr(script, *args, timeout=timeout)[0]


def run_script_with_stderr(script: str, *args: str, timeout: float = 240) -> tuple[dict, str]:
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the workers too
        process.communicate()
        raise AssertionError(f"nlp.pipe(n_process=2) did not finish in {timeout} s (hung)") from None
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err


def test_n_process_2_gives_the_same_layers_and_does_not_hang(tmp_path):
    results = run_script(SCRIPT, str(ELMO_FIXTURE), str(tmp_path / "pipeline"))
    assert results == {"shipped": True, "path": True, "spacy.load": True, "parent threads kept": True}, results


HOOKS_SCRIPT = r"""
import json, warnings
import numpy, spacy
import spacy_elmo

nlp = spacy.blank("en")
nlp.add_pipe("elmo")
texts = ["The bank of the river.", "Money in the bank.", "A cat sat.", "x"] * 5
one = list(nlp.pipe(texts, batch_size=4))
two = list(nlp.pipe(texts, batch_size=4, n_process=2))
results = {"hooks in one process": all(d.user_hooks for d in one), "hooks sent back": any(d.user_hooks for d in two)}
for doc in two:
    spacy_elmo.set_vector_hooks(doc)
results["vectors after set_vector_hooks"] = all(numpy.array_equal(a.vector, b.vector) for a, b in zip(one, two))
results["similarity"] = [one[0].similarity(one[1]), two[0].similarity(two[1])]
results["token similarity"] = [one[0][1].similarity(one[1][2]), two[0][1].similarity(two[1][2])]
print(json.dumps(results))
"""


def test_n_process_2_with_the_default_hooks_prints_no_W109_and_hooks_are_re_added_in_the_parent():
    """The workers used to set the hooks (spaCy then warned W109 in each worker: it cannot send them back);
    now the workers leave them off, and `spacy_elmo.set_vector_hooks` gives the parent's docs the same
    .vector and .similarity as one process."""
    results, err = run_script_with_stderr(HOOKS_SCRIPT, timeout=180)
    assert "W109" not in err, err[-2000:]
    assert results["hooks in one process"] and not results["hooks sent back"], results
    assert results["vectors after set_vector_hooks"], results
    for key in ("similarity", "token similarity"):
        single, multi = results[key]
        assert single == multi and 0.0 < abs(single) <= 1.0, (key, results)


ONNX_SCRIPT = r"""
import json, sys
import numpy, spacy

nlp = spacy.blank("en")
nlp.add_pipe("sentencizer")
nlp.add_pipe("elmo", config={"model": {"path": sys.argv[1], "runtime": "onnxruntime"}})
texts = [f"Sentence number {i} talks about the bank of the river. And money {i}." for i in range(30)] + ["", "x"]
texts += ["Ünïcödé 日本語 👍🏽 " + "x" * 300, " ".join(f"w{i % 41}" for i in range(300))]  # windows too
one = [d._.elmo_layers for d in nlp.pipe(texts, batch_size=8)]
same = []
for call in range(3):  # the second call used to hang
    two = [d._.elmo_layers for d in nlp.pipe(texts, batch_size=8, n_process=2)]
    same.append(len(one) == len(two) and all(numpy.array_equal(a, b) for a, b in zip(one, two)))
print(json.dumps(same))
"""


def test_n_process_2_with_the_onnx_runtime_three_calls_in_a_row(fixture_graph_file):
    assert run_script(ONNX_SCRIPT, str(fixture_graph_file.path), timeout=180) == [True] * 3
