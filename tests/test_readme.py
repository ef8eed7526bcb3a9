"""Every command and code block of README.md and project/README.md runs as written, or names the test that
runs it, whose source holds the command's distinctive text, so that none can go stale. Placeholders
(corpus.txt, weights.hdf5, MODEL, ...) are made from the test fixtures in a scratch directory, and `my.cfg`
is the tiny config with a few seconds' time limit."""

import ast
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixture_paths import ELMO_FIXTURE, FIXTURES, ROOT

README = ROOT / "README.md"
PROJECT_README = ROOT / "project" / "README.md"
TRAIN_TEXT = FIXTURES / "pretrain" / "train.txt"
DEV_TEXT = FIXTURES / "pretrain" / "dev.txt"
INSTALL_TEST = "tests/test_install.py"
PIPELINE_WHEEL = "packages/en_elmo_serving-1.0.0/dist/en_elmo_serving-1.0.0-py3-none-any.whl"
TASKS_TEST = "tests/project/test_tasks.py::test_an_optional_task_with_a_train_only_cap_a_test_split_and_no_pretraining"

# Commands another file runs: (the command's start, where: "file" or "file::function", the text that must
# be in that source verbatim: how it spells the command). A command may need several rows (run.sh, then
# the test of what run.sh runs).
RUN_ELSEWHERE = [
    ("bash run.sh test", ".ci/run", "bash run.sh test -m"),  # CI runs it
    ("bash run.sh project", "run.sh", 'project) exec "$PY" -m spacy project run all . "$@"'),
    (
        "bash run.sh project",
        "tests/project/test_workflow.py::run_workflow",
        '"-m", "spacy", "project", "run", workflow',
    ),
    (
        "python -m spacy project run all .",
        "tests/project/test_workflow.py::run_workflow",
        '"-m", "spacy", "project", "run", workflow',
    ),
    # the set-up run.sh does, which CI runs (test_torch_line_is_run_shs checks the version)
    ("pip install torch==", "run.sh", "TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}"),
    ("pip install .", "run.sh", '-m pip install -q -e ".[test,project,onnx]"'),
    # the serving recipe, word for word in the test that runs it in a fresh virtualenv
    *(
        (command, INSTALL_TEST, command)
        for command in (
            "pip wheel --no-deps . -w dist/",
            'pip install spacy "onnxruntime>=1.20,<2" h5py',
            "pip install --no-deps dist/spacy_elmo-*.whl",
            "mkdir -p packages",
            "python -m spacy package serving packages/ --name elmo_serving --version 1.0.0 --build wheel",
            f"pip install --find-links dist/ {PIPELINE_WHEEL}",
            f"pip install --no-deps {PIPELINE_WHEEL}",
            "python -m spacy_elmo embed model.onnx corpus.txt out.hdf5 --runtime onnxruntime",
        )
    ),
    # spacy.cli.train.train is what `python -m spacy train` runs
    ("python -m spacy train", "tests/pipeline/test_training.py::spacy_train", 'train(config, tmp_path / "out"'),
    *(
        (f"python project/scripts/tasks.py {step} conll", TASKS_TEST, text)
        for step, text in (
            ("convert", '"convert", "conll", f"--conll-dir={data}"'),
            ("train", '"train", "conll", variants'),
            ("evaluate", '"evaluate", "conll", variants'),
        )
    ),
    (
        "python project/scripts/seed_study.py",
        "tests/project/test_workflow.py::test_seed_study_runs_every_seed_and_summarises",
        '"project/scripts/seed_study.py", "metrics/seeds/mr.json"',
    ),
    (
        "torchrun --nproc_per_node 4 -m spacy_elmo pretrain",
        "tests/pretrain/test_distributed.py::test_two_process_gloo_ddp_matches_one_process_on_the_same_global_batch",
        "done = torchrun(*args)",
    ),
    # torchrun and a job array only set RANK/WORLD_SIZE (or --shard) for each process
    (
        "torchrun --nnodes 4",
        "tests/embed/test_shards.py::test_three_shard_processes_merged_equal_one_run_bit_for_bit",
        'env={**os.environ, "RANK": "2", "WORLD_SIZE": "3"}',
    ),
    (
        "python -m spacy_elmo embed MODEL corpus.txt out.hdf5 --shard",
        "tests/embed/test_shards.py::test_three_shard_processes_merged_equal_one_run_bit_for_bit",
        '"--shard", f"{i}/3"',
    ),
    # a download needs the network: run against a local server by the tests of the commands
    (
        "python -m spacy_elmo download",
        "tests/cli/test_models.py::test_download_fetches_into_the_cache_and_models_marks_it",
        '["download", "test/ru", "--cache", str(cache)]',
    ),
    (
        "python -m spacy_elmo info",
        "tests/cli/test_verify.py::test_info_of_a_published_model_says_where_it_comes_from",
        '["info", "test/tiny"]',
    ),
    (
        "python -m spacy_elmo embed-merge",
        "tests/embed/test_shards.py::test_three_shard_processes_merged_equal_one_run_bit_for_bit",
        'cli("embed-merge", out, *files)',
    ),
]
# Commands this file runs, by their start
RUN_HERE = [
    "bash run.sh demo",
    "python -m spacy_elmo config",
    "python -m spacy_elmo models",
    "python -m spacy init fill-config",
    "python -m spacy_elmo pretrain",
    "python -m spacy_elmo evaluate",
    "python -m spacy_elmo convert",
    "python -m spacy_elmo embed MODEL input.txt",
    "python -m spacy_elmo verify",
    "python -m spacy elmo verify",
    "python -m spacy_elmo embed path/to/weights.hdf5",
    "python -m spacy_elmo export MODEL model.onnx",
    "python project/scripts/probe_layers.py",
]


def source_of(where: str) -> str:
    """A file's text, or with ::name the source of that top-level function."""
    path, _, function = where.partition("::")
    text = (ROOT / path).read_text(encoding="utf-8")
    if not function:
        return text
    tree = ast.parse(text)
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function]
    assert found, f"{where} does not exist"
    return ast.get_source_segment(text, found[0]) or ""


def test_every_test_named_for_a_command_holds_its_text():
    every = commands(README) + commands(PROJECT_README)
    for start, where, text in RUN_ELSEWHERE:
        assert any(c.startswith(start) for c in every), f"no README command starts with {start!r}: a stale row"
        assert text in source_of(where), f"README command {start!r}: {where} does not hold {text!r}"


def test_the_torch_line_is_run_shs():
    default = re.search(r"TORCH_SPEC:-(torch==[\w.]+)", (ROOT / "run.sh").read_text(encoding="utf-8")).group(1)
    assert the("pip install torch==").split()[2] == default


def blocks(language: str, path: Path = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def commands(path: Path = README) -> list[str]:
    """Each command line of a README's bash blocks, without its trailing comment."""
    found = []
    for block in blocks("bash", path):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command:
                found.append(command)
    return found


def run(command: str, cwd: Path) -> str:
    """A README command, word for word (`python` is this interpreter), with one thread per process as the
    README advises on a shared machine (torch's default, a thread per core, was over 3x slower on a busy one)."""
    words = shlex.split(command)
    if words[:1] == ["python"]:
        words[0] = sys.executable
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
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
    # a user's config: the tiny model, stopped after a few seconds whatever max_steps says; no data path
    # (the commands give --paths.train)
    my = tiny.replace("[training]\n", "[training]\nmax_minutes = 0.05\nn_threads = 1\n", 1)
    assert my != tiny and "[paths]\ntrain = null" in my
    (tmp_path / "my.cfg").write_text(my, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("readme", [README, PROJECT_README], ids=["README", "project-README"])
def test_every_readme_command_is_run_by_a_test(readme):
    covered = [*RUN_HERE, *(start for start, _, _ in RUN_ELSEWHERE)]
    orphans = [c for c in commands(readme) if not any(c.startswith(start) for start in covered)]
    assert not orphans, f"{readme.name} commands no test runs (add them to tests/test_readme.py): {orphans}"


@pytest.mark.slow
def test_demo_and_the_component_block(tmp_path):
    assert the("bash run.sh demo").startswith("bash run.sh demo")  # run.sh demo = python -m spacy_elmo.demo
    assert "top-layer cosine" in run("python -m spacy_elmo.demo", tmp_path)
    component = next(b for b in blocks("python") if 'nlp.add_pipe("elmo")' in b)
    exec(compile(component, "README.md (the elmo component)", "exec"), {})


@pytest.mark.slow
def test_fill_config(tmp_path):
    run(the("python -m spacy_elmo config"), tmp_path)  # the base config, from the installed package
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
    assert resume == f"{user} --resume"  # the run it resumes, as written
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
def test_convert_embed_and_verify(scratch, monkeypatch):
    run(the("python -m spacy_elmo convert path/to/weights.hdf5"), scratch)
    run(the("python -m spacy_elmo convert my_model/"), scratch)
    assert (scratch / "exported" / "weights.hdf5").exists()
    run(the("python -m spacy_elmo embed MODEL input.txt"), scratch)
    monkeypatch.chdir(scratch)
    reader = next(b for b in blocks("python") if "h5py.File" in b)
    namespace: dict = {}
    exec(compile(reader, "README.md (reading embed's output)", "exec"), namespace)
    assert [v.shape for v in namespace["vectors"]] == [(4, 32), (5, 32)]  # --layers top: (n, 2P) a line
    assert run(the("python -m spacy_elmo verify my_model/"), scratch).rstrip().endswith("ok")
    assert run(the("python -m spacy elmo verify my_model/"), scratch).rstrip().endswith("ok")


@pytest.mark.parametrize("layers", ["all", "top"])
def test_the_parquet_reader_gives_the_hdf5_outputs_arrays(tmp_path, monkeypatch, layers):
    import h5py
    import numpy

    from spacy_elmo.embed import EmbedSettings, embed_file

    (tmp_path / "in.txt").write_text("The bank raised rates .\n\nA river bank\n", encoding="utf-8")  # an empty line
    settings = EmbedSettings(model=str(ELMO_FIXTURE), layers=layers, n_threads=1)
    embed_file(tmp_path / "in.txt", tmp_path / "out.parquet", settings, output_format="parquet")
    embed_file(tmp_path / "in.txt", tmp_path / "out.hdf5", settings)
    monkeypatch.chdir(tmp_path)
    reader = next(b for b in blocks("python") if "pyarrow.parquet.read_table" in b)
    assert len([line for line in reader.splitlines() if line.strip() and not line.startswith("import")]) <= 7
    namespace: dict = {}
    exec(compile(reader, "README.md (reading embed's Parquet output)", "exec"), namespace)
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        expected = [f[name][...] for name in sorted(f, key=int)]
    assert [v.shape for v in namespace["vectors"]] == [e.shape for e in expected]
    assert expected[1].shape[-2] == 0  # the empty line
    for got, want in zip(namespace["vectors"], expected):
        numpy.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_export_and_the_onnx_runtime(scratch):
    run(the("python -m spacy_elmo export MODEL model.onnx"), scratch)
    assert (scratch / "model.onnx").stat().st_size > 0
    # the serving line itself: tests/test_install.py runs it where torch is not installed
    run(the("python -m spacy_elmo embed model.onnx corpus.txt out.hdf5 --runtime onnxruntime"), scratch)
    assert (scratch / "out.hdf5").exists()


@pytest.mark.slow
def test_the_probe_commands_of_the_project_readme(scratch):
    """On a two-split MR sample (dev doubles as test); the project's biLM is the fixture."""
    corpus = scratch / "corpus" / "textcat"
    corpus.mkdir(parents=True)
    for split, sample in (("train", "train"), ("dev", "dev"), ("test", "dev")):
        shutil.copy(FIXTURES / "spacy" / sample / "mr.spacy", corpus / f"{split}.spacy")
    shutil.copytree(ELMO_FIXTURE, scratch / "training" / "bilm-domain" / "model")
    probes = [c for c in commands(PROJECT_README) if c.startswith("python project/scripts/probe_layers.py")]
    assert len(probes) == 2
    for command in probes:
        run(command.replace("project/scripts/", f"{ROOT}/project/scripts/", 1), scratch)
    assert sorted(p.name for p in (scratch / "metrics" / "probe").iterdir()) == [
        "mr-project-bilm.json",
        "mr-shipped.json",
    ]


@pytest.mark.slow
def test_pinning_a_digest_as_written(scratch):
    import json

    report = json.loads(run(the("python -m spacy_elmo verify path/to/weights.hdf5"), scratch))
    assert report["checked"] and report["max_abs_weight"]["value"] > 0
    pinned = the("python -m spacy_elmo embed path/to/weights.hdf5")
    run(pinned.replace("DIGEST", report["sha256"]), scratch)
    assert (scratch / "pinned.hdf5").exists()
    with pytest.raises(AssertionError, match="--sha256: .* differs from the pinned digest"):
        run(pinned.replace("DIGEST", "0" * 64), scratch)


@pytest.mark.slow
def test_the_catalog_listing_as_written(tmp_path):
    listed = run(the("python -m spacy_elmo models"), tmp_path)  # the catalog only: no network
    lines = listed.splitlines()
    assert lines[0].split()[:2] == ["name", "lang"]  # the header, then the models
    assert lines[1].split()[1] == "ru" and all(
        f"{name} " in listed for name in ("efml/ru", "nlpl/212", "deeppavlov/ru-news")
    )
