import json

import numpy
from typer.testing import CliRunner

from pretrain_support import ELMO_FIXTURE, SAMPLE_DEV
from spacy_elmo.io.native import load_native, save_native
from spacy_elmo.io.arrays import bilm_arrays
from spacy_elmo.cli import elmo_cli

runner = CliRunner()


def test_evaluate_writes_the_three_perplexities(trained_tiny, tmp_path):
    out = tmp_path / "results.json"
    result = runner.invoke(
        elmo_cli,
        [
            "evaluate",
            str(trained_tiny.output_dir / "model"),
            str(SAMPLE_DEV),
            "--output",
            str(out),
            "--max-tokens",
            "2000",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {"forward_ppl", "backward_ppl", "average_ppl", "n_tokens"} <= set(data)
    assert data["n_tokens"] > 2000 and 1 < data["average_ppl"] < 3000
    # the average is the geometric mean of the two directions
    assert abs(data["average_ppl"] - (data["forward_ppl"] * data["backward_ppl"]) ** 0.5) < 1e-6 * data["average_ppl"]


def test_evaluate_refuses_a_model_without_softmax_and_says_why():
    result = runner.invoke(elmo_cli, ["evaluate", str(ELMO_FIXTURE), str(SAMPLE_DEV)])
    assert result.exit_code == 1
    assert "no softmax" in result.output and "--init-from" in result.output


def test_pretrain_reports_a_missing_config_and_an_unknown_override(tmp_path):
    result = runner.invoke(elmo_cli, ["pretrain", str(tmp_path / "nope.cfg"), str(tmp_path / "out")])
    assert result.exit_code == 1 and "nope.cfg" in result.output and "pretrain_tiny.cfg" in result.output
    result = runner.invoke(
        elmo_cli, ["pretrain", "pretrain_tiny.cfg", str(tmp_path / "out"), "--training.max_stepz", "3"]
    )
    assert result.exit_code == 1 and "max_stepz" in result.output


def test_compact_native_copy_stores_the_softmax_as_float16(trained_tiny, tmp_path):
    model = load_native(trained_tiny.output_dir / "model")
    save_native(model, tmp_path / "compact", softmax_dtype="float16")
    back = load_native(tmp_path / "compact")
    a, b = dict(bilm_arrays(model)), dict(bilm_arrays(back))
    for name in a:
        if name.startswith("softmax/"):
            assert numpy.array_equal(b[name], a[name].astype(numpy.float16).astype(numpy.float32)), name
        else:
            assert numpy.array_equal(b[name], a[name]), name
    assert back.vocab == model.vocab
    assert (tmp_path / "compact" / "model.msgpack").stat().st_size < (
        trained_tiny.output_dir / "model" / "model.msgpack"
    ).stat().st_size
