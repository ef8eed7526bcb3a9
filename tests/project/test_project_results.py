"""The results table and the plots, on synthetic run outputs (no training needed)."""

import json
import math

import matplotlib.image
import numpy
import pytest
from thinc.api import Model

import collect_results
import make_plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCORES = {
    ("ner", "baseline"): 0.30,
    ("ner", "elmo"): 0.34,
    ("ner", "elmo_shipped"): 0.36,
    ("textcat", "baseline"): 0.74,
    ("textcat", "elmo"): 0.76,
    ("textcat", "elmo_shipped"): 0.78,
}


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf8")


def make_runs(root, scores=SCORES):
    for (task, variant), score in scores.items():
        spec = next(t for t in collect_results.TASKS if t.name == task)
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
    write(root / "metrics" / "checks" / "roundtrip.json", {"passed": True, "summary": "bit for bit"})


@pytest.fixture
def fake_weights(monkeypatch):
    def mix_weights(model_dir):
        component = "ner" if "ner-" in str(model_dir) else "textcat"
        return {component: ([0.2, 0.5, 0.3], 1.5)}

    monkeypatch.setattr(collect_results, "mix_weights", mix_weights)


def test_collect_writes_every_row(tmp_path, fake_weights):
    make_runs(tmp_path)
    result = collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "metrics" / "results")
    rows = {(r["task"], r["variant"]): r for r in result["rows"]}
    assert set(rows) == set(SCORES)
    for key, row in rows.items():
        assert row["test"] == pytest.approx(SCORES[key])
        assert row["dev"] == pytest.approx(SCORES[key] - 0.01)
        assert row["seed"] == 0 and row["wall_time_s"] == 12.5
        assert (row["layer_weights"] is None) == (key[1] == "baseline")
    assert rows[("textcat", "elmo")]["metric"] == "accuracy"
    assert rows[("ner", "elmo")]["bilm"] == "training/bilm-domain/model"
    assert rows[("ner", "elmo_shipped")]["bilm"] == "en_elmo_small (shipped)"
    assert rows[("ner", "baseline")]["bilm"] is None
    table = (tmp_path / "metrics" / "results.md").read_text()
    assert "| ner | WNUT-17 | baseline (spaCy tok2vec) | - | entity F1 (`ents_f`) | 29.00 | 30.00 | 0 | 12 |" in table
    assert "| textcat | MR | baseline (spaCy tok2vec) | - | accuracy (`cats_micro_f`) |" in table
    assert "| textcat | ELMo (project biLM, domain-adapted) | 0.200 | 0.500 | 0.300 | 1.500 |" in table
    assert "| wikitext_valid | 420.0 | 440.0 | 430.0 | 2000 | 3.5% |" in table
    assert "- roundtrip: passed - bit for bit" in table
    assert json.loads((tmp_path / "metrics" / "results.json").read_text()) == result


def test_a_missing_required_run_is_an_error(tmp_path, fake_weights):
    make_runs(tmp_path)
    (tmp_path / "metrics" / "eval" / "textcat-elmo.json").unlink()
    with pytest.raises(FileNotFoundError, match="textcat-elmo.json"):
        collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out")


def test_allow_missing_leaves_runs_out(tmp_path, fake_weights):
    make_runs(tmp_path)
    (tmp_path / "metrics" / "eval" / "textcat-elmo_shipped.json").unlink()
    rows = collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out", allow_missing=True)[
        "rows"
    ]
    assert len(rows) == 5 and ("textcat", "elmo_shipped") not in {(r["task"], r["variant"]) for r in rows}


def test_optional_tasks_appear_only_when_run_and_report_dev(tmp_path, fake_weights):
    make_runs(tmp_path, {**SCORES, ("conll", "baseline"): 0.8})
    rows = collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out")["rows"]
    conll = [r for r in rows if r["task"] == "conll"]
    assert len(conll) == 1 and conll[0]["dev"] == pytest.approx(0.8) and conll[0]["test"] is None


def test_optional_tasks_report_test_when_a_test_file_was_evaluated(tmp_path, fake_weights):
    make_runs(tmp_path, {**SCORES, ("conll", "baseline"): 0.8, ("sst5", "baseline"): 0.4})
    write(tmp_path / "metrics" / "eval" / "conll-baseline.test.json", {"ner": {"ents_f": 0.75}})
    rows = collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out")["rows"]
    conll, sst5 = ([r for r in rows if r["task"] == name][0] for name in ("conll", "sst5"))
    assert conll["dev"] == pytest.approx(0.8) and conll["test"] == pytest.approx(0.75)
    assert sst5["dev"] == pytest.approx(0.4) and sst5["test"] is None  # no test file evaluated
    assert conll["metric_key"] == "ents_f" and sst5["metric_key"] == "cats_micro_f"


def test_non_finite_scores_are_rejected(tmp_path, fake_weights):
    make_runs(tmp_path, {**SCORES, ("ner", "elmo"): float("nan")})
    with pytest.raises(ValueError, match="finite"):
        collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out")


def test_node_mix_reads_softmax_weights_and_gamma():
    node = Model(
        "elmo-scalar-mix", lambda model, X, is_train: (X, lambda dY: dY), params={"weights": None, "gamma": None}
    )
    node.set_param("weights", numpy.asarray([0.0, math.log(2.0), math.log(5.0)], dtype="f"))
    node.set_param("gamma", numpy.asarray([0.7], dtype="f"))
    weights, gamma = collect_results.node_mix(node)
    assert weights == pytest.approx([1 / 8, 2 / 8, 5 / 8], abs=1e-6)
    assert gamma == pytest.approx(0.7)
    other = Model("linear", lambda model, X, is_train: (X, lambda dY: dY), params={"W": None})
    assert collect_results.node_mix(other) is None


def test_plots_are_pngs_with_content(tmp_path, fake_weights):
    make_runs(tmp_path)
    collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "metrics" / "results")
    log = tmp_path / "metrics.jsonl"
    records = [{"type": "eval", "step": 0, "dev_average_ppl": 9000.0}]
    for step in range(10, 110, 10):
        loss = 9.0 - step / 20
        records.append({"type": "train", "step": step, "train_loss": loss, "train_ppl": math.exp(loss)})
    records.append({"type": "eval", "step": 100, "dev_average_ppl": 300.0})
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    written = make_plots.make_plots(tmp_path / "metrics" / "results.json", log, tmp_path / "plots")
    assert sorted(p.name for p in written) == ["layer_weights.png", "pretraining.png", "scores.png"]
    for path in written:
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.shape[0] >= 300 and image.shape[1] >= 500
        assert image.std() > 0.01


def test_pretraining_plot_needs_known_keys(tmp_path):
    with pytest.raises(ValueError, match="none of the keys"):
        make_plots.plot_pretraining([{"step": 1, "something": 2.0}], tmp_path / "x.png")
