"""End to end: `spacy project run all` on tiny settings in a copy of the project (project.yml, project/ and
assets/: what it needs, nothing of tests/), then every output checked for existence and sanity, then a
second run that must skip every step.

Tiny settings: the tiny pretraining config for a few steps on 20k words, 60 documents of each
split, a handful of training steps, and the bilm-tf fixture standing in for the shipped model.
The numbers it produces mean nothing; the test is about the plumbing.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import srsly

import spacy_elmo
from fixture_paths import ELMO_FIXTURE, ROOT

TINY_PRETRAIN = Path(spacy_elmo.__file__).parent / "configs" / "pretrain_tiny.cfg"
TASKS = ("ner", "textcat")
VARIANTS = ("baseline", "elmo", "elmo_shipped")
TINY_VARS = {
    "pretrain_config": str(TINY_PRETRAIN),
    "pretrain_steps": 20,
    "adapt_steps": 5,
    "corpus_max_words": 20000,
    "heldout_max_words": 2000,
    "pretrained_elmo": str(ELMO_FIXTURE),
    "max_docs": 60,
    "ner_epochs": 1,
    "textcat_epochs": 1,
    "max_steps": 6,
    "eval_frequency": 3,
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
pytestmark = pytest.mark.slow


def run_workflow(project: Path, workflow: str = "all") -> str:
    overrides = [item for key, value in TINY_VARS.items() for item in (f"--vars.{key}", str(value))]
    command = [sys.executable, "-m", "spacy", "project", "run", workflow, str(project), *overrides]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=1500)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        pytest.fail(f"`spacy project run {workflow}` failed ({result.returncode}); last output:\n{output[-6000:]}")
    return output


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the project (what a user clones) run once end to end."""
    root = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "project.yml", root / "project.yml")
    shutil.copytree(ROOT / "project", root / "project", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "assets", root / "assets")
    output = run_workflow(root)
    return root, output


def read_json(path: Path):
    assert path.is_file(), f"missing output {path}"
    return json.loads(path.read_text(encoding="utf8"))


def test_corpus_and_data(project):
    root, _ = project
    for name in ("pretrain/train.txt", "pretrain/dev.txt", "heldout/gutenberg_test.txt", "heldout/wikitext_valid.txt"):
        text = (root / "corpus" / name).read_text(encoding="utf8")
        assert len(text.split()) >= 2000, name
    for task in TASKS:
        for split in ("train", "dev", "test"):
            assert (root / "corpus" / task / f"{split}.spacy").stat().st_size > 0


def test_pretraining_and_perplexity(project):
    root, _ = project
    assert (root / "training" / "bilm" / "model" / "model.msgpack").is_file()
    assert (root / "training" / "bilm-domain" / "model" / "model.msgpack").is_file()
    assert len((root / "corpus" / "domain" / "train.txt").read_text(encoding="utf8").splitlines()) == 2 * 60
    records = [
        json.loads(line)
        for line in (root / "training" / "bilm" / "metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]
    assert any(r.get("type") == "train" for r in records)
    for name in ("gutenberg_test", "wikitext_valid"):
        ppl = read_json(root / "metrics" / "perplexity" / f"{name}.json")
        for key in ("forward_ppl", "backward_ppl", "average_ppl"):
            assert math.isfinite(ppl[key]) and ppl[key] > 1.0, (name, key, ppl[key])
        assert ppl["n_tokens"] > 1000


def test_the_export_and_the_package(project):
    # the tests of the package hold an export to its original and install a package (tests/io/test_hdf5.py,
    # tests/pipeline/test_package.py); here: the workflow made them
    root, _ = project
    assert (root / "training" / "bilm-tf" / "weights.hdf5").is_file()
    meta = read_json(root / "packages" / "en_ner_elmo-0.0.0" / "meta.json")
    assert {"elmo", "ner"} <= set(meta["pipeline"])


def test_results_table_has_every_run(project):
    root, _ = project
    results = read_json(root / "metrics" / "results.json")
    rows = {(r["task"], r["variant"]): r for r in results["rows"]}
    assert set(rows) == {(t, v) for t in TASKS for v in VARIANTS}
    for (_task, variant), row in rows.items():
        assert 0.0 <= row["test"] <= 1.0 and 0.0 <= row["dev"] <= 1.0, row
        assert row["seed"] == 0 and row["wall_time_s"] > 0
        if variant == "baseline":
            assert row["layer_weights"] is None
        else:
            weights = row["layer_weights"]
            assert len(weights) == 3 and abs(sum(weights) - 1.0) < 1e-5, row
    assert set(results["perplexity"]) == {"gutenberg_test", "wikitext_valid"}
    table = (root / "metrics" / "results.md").read_text(encoding="utf8")
    assert len(re.findall(r"^\| (ner|textcat) \|", table, flags=re.M)) == 6 + 4  # scores + layer weights


def test_plots_are_readable_pngs(project):
    root, _ = project
    import matplotlib.image

    for name in ("pretraining", "layer_weights", "scores"):
        path = root / "metrics" / "plots" / f"{name}.png"
        assert path.read_bytes()[:8] == PNG_SIGNATURE, name
        image = matplotlib.image.imread(path)
        assert image.shape[0] >= 300 and image.shape[1] >= 500, (name, image.shape)
        assert image.std() > 0.01, f"{name} looks blank"


def test_a_second_run_skips_every_step(project):
    root, _ = project
    output = run_workflow(root)
    workflows = srsly.read_yaml(root / "project.yml")["workflows"]
    ran = re.findall(r"Running command: (.*)", output)
    assert not ran, f"the second run re-ran: {ran}"
    for command in workflows["all"]:
        assert f"Skipping '{command}': nothing changed" in output, command


def test_seed_study_runs_every_seed_and_summarises(project):
    root, _ = project
    # the command of project/README.md
    command = [sys.executable, "project/scripts/seed_study.py", "metrics/seeds/mr.json", "--seeds", "0", "1"]
    command += ["--threads", "1", "--data", "corpus/textcat"]
    command += ["--variant", "baseline", "project/configs/textcat_baseline.cfg"]
    command += ["--variant", "elmo", "project/configs/textcat_elmo.cfg", "training/bilm-domain/model"]
    command += ["--variant", "elmo-shipped", "project/configs/textcat_elmo.cfg", str(TINY_VARS["pretrained_elmo"])]
    command += ["--training.max_epochs", str(TINY_VARS["textcat_epochs"])]
    command += ["--training.max_steps", str(TINY_VARS["max_steps"])]
    command += ["--training.eval_frequency", str(TINY_VARS["eval_frequency"])]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    study = read_json(root / "metrics" / "seeds" / "mr.json")
    assert study["seeds"] == [0, 1]
    assert sorted({(r["variant"], r["seed"]) for r in study["runs"]}) == [
        (variant, seed) for variant in ("baseline", "elmo", "elmo-shipped") for seed in (0, 1)
    ]
    for name, summary in study["summary"].items():
        tests = [r["test"] for r in study["runs"] if r["variant"] == name]
        assert all(0.0 <= t <= 100.0 for t in tests)
        assert summary["n"] == 2 and math.isclose(summary["mean"], sum(tests) / 2)
        assert math.isclose(summary["sd"], abs(tests[0] - tests[1]) / math.sqrt(2), abs_tol=1e-9)
    # the shipped-model variant really used the biLM given by vars.pretrained_elmo
    config = (root / "training" / "seeds" / "elmo-shipped-seed0" / "model-best" / "config.cfg").read_text()
    assert "elmo-fixture" in config
