"""`spacy package` -> `pip install` -> `spacy.load` of the package in a fresh process, with pickle and
torch.load disabled there (the weights are the native msgpack format, nothing else is needed)."""

import json
import os
import subprocess
import sys

import numpy
import pytest
import torch
from spacy.tokens import DocBin
from spacy.training import Example
from spacy.util import load_config, load_model_from_config

from fixture_paths import FIXTURES

pytestmark = pytest.mark.slow  # runs `spacy package`, pip install and a fresh interpreter

TEXTS = ["Packaged pipelines load anywhere .", "New York is big", ""]

LOAD_SCRIPT = """
import json, pickle, sys
import torch

def refuse(*args, **kwargs):
    raise AssertionError("pickle / torch.load used while loading the pipeline")

pickle.load = pickle.loads = pickle.Unpickler = refuse
torch.load = refuse
import spacy

nlp = spacy.load(sys.argv[1])
texts = json.loads(sys.argv[2])
docs = list(nlp.pipe(texts))
print(json.dumps({
    "pipe_names": nlp.pipe_names,
    "layers": [d._.elmo_layers.tolist() for d in docs],
    "ents": [[[e.start, e.end, e.label_] for e in d.ents] for d in docs],
}))
"""


def elmo_ner_pipeline():
    """elmo + an ner listening to it, initialized on 8 WNUT-17 docs (the fixture biLM)."""
    torch.set_num_threads(1)
    config = load_config(
        FIXTURES / "spacy" / "ner_textcat.cfg", overrides={"paths.elmo": str(FIXTURES / "elmo-fixture")}
    )
    config["nlp"]["pipeline"] = ["elmo", "ner"]
    nlp = load_model_from_config(config, auto_fill=True)
    docs = list(DocBin().from_disk(FIXTURES / "spacy" / "train" / "wnut17.spacy").get_docs(nlp.vocab))[:8]
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in docs])
    return nlp


def test_package_installs_and_loads_without_pickle(tmp_path):
    nlp = elmo_ner_pipeline()
    nlp.meta["name"] = "elmo_package_test"
    nlp.meta["version"] = "0.0.1"
    expected = list(nlp.pipe(TEXTS))
    nlp.to_disk(tmp_path / "pipeline")

    def run(*command: str, env=None) -> str:
        result = subprocess.run(list(command), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result.stdout

    (tmp_path / "packages").mkdir()
    run(sys.executable, "-m", "spacy", "package", str(tmp_path / "pipeline"), str(tmp_path / "packages"))
    sdists = list((tmp_path / "packages").glob("*/dist/*.tar.gz"))
    assert len(sdists) == 1
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation"]
    run(*pip, "--target", str(target), str(sdists[0]))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    out = json.loads(run(sys.executable, "-s", "-c", LOAD_SCRIPT, "en_elmo_package_test", json.dumps(TEXTS), env=env))
    assert out["pipe_names"] == ["elmo", "ner"]
    for doc, layers, ents in zip(expected, out["layers"], out["ents"]):
        numpy.testing.assert_allclose(
            numpy.asarray(layers, dtype="float32").reshape(doc._.elmo_layers.shape), doc._.elmo_layers, atol=1e-6
        )
        assert ents == [[e.start, e.end, e.label_] for e in doc.ents]


def test_standalone_ner_after_replace_listeners_loads_in_a_fresh_process(tmp_path):
    """replace_listeners + removing the elmo pipe leaves an ner that owns its biLM, loadable alone."""
    nlp = elmo_ner_pipeline()
    texts = ["New York is big", "Saw Justin Bieber in London"]
    expected = [[[e.start, e.end, e.label_] for e in d.ents] for d in nlp.pipe(texts)]
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    nlp.remove_pipe("elmo")
    nlp.to_disk(tmp_path / "ner-only")
    script = LOAD_SCRIPT.replace('"layers": [d._.elmo_layers.tolist() for d in docs],', "")
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "ner-only"), json.dumps(texts)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    assert out["pipe_names"] == ["ner"]
    assert out["ents"] == expected
