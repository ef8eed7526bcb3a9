"""The results table, on made-up run outputs (no training needed), and the layer mix it reads."""

import json
import math

import numpy
import pytest
from thinc.api import Model

import collect_results
from spacy_elmo.layers import ScalarMix_v1


def test_collect_writes_every_row(tmp_path, scores, make_runs, fake_weights):
    make_runs(tmp_path, scores)
    result = collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "metrics" / "results")
    rows = {(r["task"], r["variant"]): r for r in result["rows"]}
    assert set(rows) == set(scores)
    for key, row in rows.items():
        assert row["test"] == pytest.approx(scores[key])
        assert row["dev"] == pytest.approx(scores[key] - 0.01)
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
    assert json.loads((tmp_path / "metrics" / "results.json").read_text()) == result
    assert set(result) == {"rows", "perplexity"}


def test_a_missing_required_run_is_an_error(tmp_path, make_runs, fake_weights):
    make_runs(tmp_path)
    (tmp_path / "metrics" / "eval" / "textcat-elmo.json").unlink()
    with pytest.raises(FileNotFoundError, match="textcat-elmo.json"):
        collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out")


def test_allow_missing_leaves_runs_out(tmp_path, make_runs, fake_weights):
    make_runs(tmp_path)
    (tmp_path / "metrics" / "eval" / "textcat-elmo_shipped.json").unlink()
    rows = collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out", allow_missing=True)[
        "rows"
    ]
    assert len(rows) == 5 and ("textcat", "elmo_shipped") not in {(r["task"], r["variant"]) for r in rows}


def test_optional_tasks_appear_only_when_run_and_report_dev(tmp_path, scores, make_runs, fake_weights):
    make_runs(tmp_path, {**scores, ("conll", "baseline"): 0.8})
    rows = collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out")["rows"]
    conll = [r for r in rows if r["task"] == "conll"]
    assert len(conll) == 1 and conll[0]["dev"] == pytest.approx(0.8) and conll[0]["test"] is None


def test_optional_tasks_report_test_when_a_test_file_was_evaluated(tmp_path, scores, make_runs, fake_weights):
    make_runs(tmp_path, {**scores, ("conll", "baseline"): 0.8, ("sst5", "baseline"): 0.4})
    (tmp_path / "metrics" / "eval" / "conll-baseline.test.json").write_text(json.dumps({"ner": {"ents_f": 0.75}}))
    rows = collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out")["rows"]
    conll, sst5 = ([r for r in rows if r["task"] == name][0] for name in ("conll", "sst5"))
    assert conll["dev"] == pytest.approx(0.8) and conll["test"] == pytest.approx(0.75)
    assert sst5["dev"] == pytest.approx(0.4) and sst5["test"] is None  # no test file evaluated
    assert conll["metric_key"] == "ents_f" and sst5["metric_key"] == "cats_micro_f"


def test_non_finite_scores_are_rejected(tmp_path, scores, make_runs, fake_weights):
    make_runs(tmp_path, {**scores, ("ner", "elmo"): float("nan")})
    with pytest.raises(ValueError, match="finite"):
        collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "out")


def test_node_mix_reads_softmax_weights_and_gamma():
    node = ScalarMix_v1(n_layers=3)
    node.initialize()
    node.set_param("weights", numpy.asarray([0.0, math.log(2.0), math.log(5.0)], dtype="f"))
    node.set_param("gamma", numpy.asarray([0.7], dtype="f"))
    weights, gamma = collect_results.node_mix(node)
    assert weights == pytest.approx([1 / 8, 2 / 8, 5 / 8], abs=1e-6)
    assert gamma == pytest.approx(0.7)
    other = Model("linear", lambda model, X, is_train: (X, lambda dY: dY), params={"W": None})
    assert collect_results.node_mix(other) is None
    # found by what it is, not by its name
    namesake = Model(node.name, lambda model, X, is_train: (X, lambda dY: dY), params={"weights": None})
    assert collect_results.node_mix(namesake) is None
