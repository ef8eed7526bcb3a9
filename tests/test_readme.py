"""Every command and code block of the README runs as written (or names the test that runs it instead),
so that none can go stale. Placeholders (corpus.txt, weights.hdf5, MODEL, ...) are made from the test
fixtures in a scratch directory, and `my.cfg` is the tiny config with a few seconds' time limit."""

import ast
import gzip
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixture_paths import ELMO_FIXTURE, FIXTURES, ROOT

README = ROOT / "README.md"
TRAIN_TEXT = FIXTURES / "pretrain" / "train.txt"
DEV_TEXT = FIXTURES / "pretrain" / "dev.txt"

# Commands another test runs, matched by their start -> the test that runs them ("file::function");
# test_every_readme_command_is_run_by_a_test checks that each named test exists.
RUN_ELSEWHERE = {
    "bash run.sh test": ".ci/run",  # CI runs it: checked to be in .ci/run
    "bash run.sh project": "tests/project/test_workflow.py::test_a_second_run_skips_every_step",
    "pip install": "tests/test_packaging.py::test_wheel_metadata",
    "python -m spacy train": "tests/pipeline/test_training.py::test_spacy_train_ner_and_textcat_with_a_frozen_bilm",
    "python project/scripts/tasks.py": (
        "tests/project/test_tasks.py::test_an_optional_task_with_a_train_only_cap_a_test_split_and_no_pretraining"
    ),
    "torchrun --nproc_per_node 4 -m spacy_elmo pretrain": (
        "tests/pretrain/test_distributed.py::test_two_process_gloo_ddp_matches_one_process_on_the_same_global_batch"
    ),
    # torchrun and a job array only set RANK/WORLD_SIZE (or --shard) for each process
    "torchrun --nnodes 4": "tests/embed/test_shards.py::test_three_shard_processes_merged_equal_one_run_bit_for_bit",
    "python -m spacy_elmo embed MODEL corpus.txt out.hdf5 --shard": (
        "tests/embed/test_shards.py::test_three_shard_processes_merged_equal_one_run_bit_for_bit"
    ),
    "python -m spacy_elmo embed-merge": (
        "tests/embed/test_shards.py::test_three_shard_processes_merged_equal_one_run_bit_for_bit"
    ),
    "spacy elmo convert ...": "tests/test_registry.py::test_spacy_cli_lists_the_subcommands",
    "python -m spacy_elmo export MODEL model.onnx": (
        "tests/onnx/test_export.py::test_onnx_runtime_matches_torch_on_every_layer_at_any_length"
    ),
    "python -m spacy_elmo embed model.onnx corpus.txt out.hdf5 --runtime onnxruntime": (
        "tests/embed/test_output.py::test_the_onnx_runtime_embeds_the_torch_runtimes_layers"
    ),
}


def test_every_test_named_for_a_readme_command_exists():
    for command, where in RUN_ELSEWHERE.items():
        if where == ".ci/run":
            ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
            assert "bash run.sh test -m" in ci, "README says CI runs `bash run.sh test`"
            continue
        path, function = where.split("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert function in names, f"README command {command!r}: {where} does not exist"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def commands() -> list[str]:
    """Each command line of the README's bash blocks, without its trailing comment."""
    found = []
    for block in blocks("bash"):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command:
                found.append(command)
    return found


def run(command: str, cwd: Path) -> str:
    """A README command, word for word (`python` is this interpreter)."""
    words = shlex.split(command)
    if words[:1] == ["python"]:
        words[0] = sys.executable
    done = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"README command failed: {command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def the(prefix: str) -> str:
    matches = [c for c in commands() if c.startswith(prefix)]
    assert len(matches) == 1, f"expected one README command starting {prefix!r}, found {matches}"
    return matches[0]


@pytest.fixture
def scratch(tmp_path) -> Path:
    """The files the README's commands name."""
    shutil.copy(TRAIN_TEXT, tmp_path / "corpus.txt")
    with gzip.open(tmp_path / "corpus.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write(TRAIN_TEXT.read_text(encoding="utf-8"))
    shutil.copy(DEV_TEXT, tmp_path / "held_out.txt")
    shutil.copy(ELMO_FIXTURE / "lm_weights.hdf5", tmp_path / "weights.hdf5")
    shutil.copy(ELMO_FIXTURE / "options.json", tmp_path / "options.json")
    (tmp_path / "path" / "to").mkdir(parents=True)
    shutil.copy(ELMO_FIXTURE / "lm_weights.hdf5", tmp_path / "path" / "to" / "weights.hdf5")
    shutil.copy(ELMO_FIXTURE / "options.json", tmp_path / "path" / "to" / "options.json")
    shutil.copytree(ELMO_FIXTURE, tmp_path / "MODEL")
    (tmp_path / "input.txt").write_text("The first sentence .\nAnd a second one .\n", encoding="utf-8")
    tiny = (ROOT / "spacy_elmo" / "configs" / "pretrain_tiny.cfg").read_text(encoding="utf-8")
    # a user's config: the tiny model on corpus.txt.gz, stopped after a few seconds whatever max_steps says
    my = tiny.replace("[training]\n", "[training]\nmax_minutes = 0.05\nn_threads = 1\n", 1)
    my = my.replace("[paths]\ntrain = null", '[paths]\ntrain = "corpus.txt.gz"', 1)
    assert my != tiny and 'train = "corpus.txt.gz"' in my
    (tmp_path / "my.cfg").write_text(my, encoding="utf-8")
    return tmp_path


def test_every_readme_command_is_run_by_a_test():
    covered = {
        "bash run.sh demo",
        "python -m spacy init fill-config",
        "python -m spacy_elmo pretrain",
        "python -m spacy_elmo evaluate",
        "python -m spacy_elmo convert",
        "python -m spacy_elmo embed MODEL input.txt",
        "python -m spacy_elmo verify",
        "python -m spacy_elmo embed path/to/weights.hdf5",
        *RUN_ELSEWHERE,
    }
    orphans = [c for c in commands() if not any(c.startswith(prefix) for prefix in covered)]
    assert not orphans, f"README commands no test runs (add them to tests/test_readme.py): {orphans}"


@pytest.mark.slow
def test_demo_and_the_component_block(tmp_path):
    assert the("bash run.sh demo").startswith("bash run.sh demo")  # run.sh demo = python -m spacy_elmo.demo
    assert "top-layer cosine" in run("python -m spacy_elmo.demo", tmp_path)
    component = next(b for b in blocks("python") if 'nlp.add_pipe("elmo")' in b)
    exec(compile(component, "README.md (the elmo component)", "exec"), {})


@pytest.mark.slow
def test_fill_config(tmp_path):
    shutil.copytree(ROOT / "spacy_elmo" / "configs", tmp_path / "spacy_elmo" / "configs")
    run(the("python -m spacy init fill-config"), tmp_path)
    assert "spacy-elmo.ElmoListener.v1" in (tmp_path / "config.cfg").read_text(encoding="utf-8")


@pytest.mark.slow
def test_pretraining_commands_as_written(scratch):
    pretraining = [c for c in commands() if c.startswith("python -m spacy_elmo pretrain")]
    first, user, resume, init_from = pretraining
    tiny = scratch / "tiny"
    tiny.mkdir()
    shutil.copy(scratch / "corpus.txt", tiny)
    run(first, tiny)
    assert (tiny / "out" / "model" / "model.msgpack").exists()

    run(user, scratch)  # stops on my.cfg's time limit, with a checkpoint
    said = run(resume, scratch)
    assert "resumed from" in said
    metrics = run(the("python -m spacy_elmo evaluate"), scratch)
    assert "average_ppl" in metrics and (scratch / "ppl.json").exists()

    shutil.rmtree(scratch / "out")
    assert "continuing from weights.hdf5" in run(init_from, scratch)


def test_python_api_block(scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    api = next(b for b in blocks("python") if "load_model(" in b)
    namespace: dict = {}
    exec(compile(api, "README.md (the Python loader)", "exec"), namespace)
    assert namespace["layers"][0].shape == (3, 3, 32)


@pytest.mark.slow
def test_convert_embed_and_verify(scratch):
    run(the("python -m spacy_elmo convert path/to/weights.hdf5"), scratch)
    run(the("python -m spacy_elmo convert my_model/"), scratch)
    assert (scratch / "exported" / "weights.hdf5").exists()
    run(the("python -m spacy_elmo embed MODEL input.txt"), scratch)
    assert (scratch / "out.hdf5").exists()
    assert run(the("python -m spacy_elmo verify my_model/"), scratch).rstrip().endswith("ok")


@pytest.mark.slow
def test_pinning_a_digest_as_written(scratch):
    import json

    report = json.loads(run(the("python -m spacy_elmo verify path/to/weights.hdf5"), scratch))
    assert report["checked"] and report["max_abs_weight"]["value"] > 0
    pinned = the("python -m spacy_elmo embed path/to/weights.hdf5")
    run(pinned.replace("DIGEST", report["sha256"]), scratch)
    assert (scratch / "pinned.hdf5").exists()
    with pytest.raises(AssertionError, match="differs from the digest pinned by --sha256"):
        run(pinned.replace("DIGEST", "0" * 64), scratch)
