"""The project's scripts are plain files under project/scripts: importable here. Fixtures shared by
the project's tests: the committed data, and the outputs of a workflow run made up without training."""

import json
import sys

import pytest

from fixture_paths import ROOT

SCRIPTS = ROOT / "project" / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import collect_results  # noqa: E402
from common import TASKS  # noqa: E402

# the test score of each run; the dev score (from meta.json) is 0.01 lower
SCORES = {
    ("ner", "baseline"): 0.30,
    ("ner", "elmo"): 0.34,
    ("ner", "elmo_shipped"): 0.36,
    ("textcat", "baseline"): 0.74,
    ("textcat", "elmo"): 0.76,
    ("textcat", "elmo_shipped"): 0.78,
}


@pytest.fixture(scope="session")
def scores():
    return dict(SCORES)


@pytest.fixture(scope="session")
def assets():
    return ROOT / "assets"


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf8")


@pytest.fixture
def make_runs():
    """make_runs(root, scores=SCORES): what the workflow leaves under root/training and root/metrics
    for runs with these test scores (config, meta, timing, evaluation) and a perplexity."""

    def make(root, scores=SCORES):
        for (task, variant), score in scores.items():
            spec = TASKS[task]
            run = root / "training" / f"{task}-{variant}"
            write(run / "model-best" / "meta.json", {"performance": {spec.metric: score - 0.01}})
            bilm_path = "" if variant == "elmo_shipped" else "training/bilm-domain/model"
            elmo = (
                ""
                if variant == "baseline"
                else f'[components]\n\n[components.elmo]\n\n[components.elmo.model]\npath = "{bilm_path}"\n'
            )
            write(run / "model-best" / "config.cfg", "[system]\nseed = 0\ngpu_allocator = null\n\n" + elmo)
            write(run / "timing.json", {"wall_time_s": 12.5})
            write(root / "metrics" / "eval" / f"{task}-{variant}.json", {spec.component: {spec.metric: score}})
        write(
            root / "metrics" / "perplexity" / "wikitext_valid.json",
            {"forward_ppl": 420.0, "backward_ppl": 440.0, "average_ppl": 430.0, "n_tokens": 2000, "oov_rate": 0.035},
        )

    return make


@pytest.fixture
def fake_weights(monkeypatch):
    """Layer weights without loading pipelines: every ELMo run's mix is [0.2, 0.5, 0.3], gamma 1.5."""

    def mix_weights(model_dir):
        component = "ner" if "ner-" in str(model_dir) else "textcat"
        return {component: ([0.2, 0.5, 0.3], 1.5)}

    monkeypatch.setattr(collect_results, "mix_weights", mix_weights)
