import json

import numpy
from typer.testing import CliRunner

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.cli import elmo_cli
from spacy_elmo.io.arrays import bilm_arrays
from spacy_elmo.io.native import save_native
from spacy_elmo.io.resolve import load_model

runner = CliRunner()


def test_evaluate_writes_the_three_perplexities(trained_tiny, tmp_path, sample_dev):
    out = tmp_path / "results.json"
    result = runner.invoke(
        elmo_cli,
        [
            "evaluate",
            str(trained_tiny.output_dir / "model"),
            str(sample_dev),
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


def test_evaluate_reads_a_jsonl_file_as_jsonl_unless_told_otherwise(trained_tiny, tmp_path, sample_dev):
    lines = [line for line in sample_dev.read_text(encoding="utf-8").splitlines() if line.strip()][:40]
    records = tmp_path / "dev.jsonl"
    records.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines), encoding="utf-8")
    plain = tmp_path / "dev.txt"
    plain.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    model = str(trained_tiny.output_dir / "model")
    results = []
    for args in ([str(records)], [str(plain)], [str(records), "--format", "text"]):
        result = runner.invoke(elmo_cli, ["evaluate", model, *args, "--output", str(tmp_path / "out.json")])
        assert result.exit_code == 0, result.output
        results.append(json.loads((tmp_path / "out.json").read_text(encoding="utf-8")))
    assert results[0]["n_tokens"] == results[1]["n_tokens"] != results[2]["n_tokens"]
    assert results[0]["average_ppl"] == results[1]["average_ppl"]


def test_evaluate_refuses_a_model_without_softmax_and_says_why(sample_dev):
    result = runner.invoke(elmo_cli, ["evaluate", str(ELMO_FIXTURE), str(sample_dev)])
    assert result.exit_code == 1
    assert "no softmax" in result.output and "--init-from" in result.output


def test_pretrain_reports_a_missing_config_and_an_unknown_override(tmp_path):
    result = runner.invoke(elmo_cli, ["pretrain", str(tmp_path / "nope.cfg"), str(tmp_path / "out")])
    assert result.exit_code == 1 and "nope.cfg" in result.output and "pretrain_tiny.cfg" in result.output
    result = runner.invoke(
        elmo_cli, ["pretrain", "pretrain_tiny.cfg", str(tmp_path / "out"), "--training.max_stepz", "3"]
    )
    assert result.exit_code == 1 and "max_stepz" in result.output


def test_pretrain_names_the_config_file_and_the_key_of_a_bad_value(tmp_path, sample_train):
    args = ["pretrain", "pretrain_tiny.cfg", str(tmp_path / "out"), "--paths.train", str(sample_train)]
    result = runner.invoke(elmo_cli, [*args, "--training.schedule.decay", "exponential"])
    assert result.exit_code == 1 and "pretrain_tiny.cfg: training.schedule.decay: 'exponential' is not" in result.output
    assert not (tmp_path / "out").exists()  # refused before any work


def test_compact_native_copy_stores_the_softmax_as_float16(trained_tiny, tmp_path):
    model = load_model(trained_tiny.output_dir / "model").bilm
    save_native(model, tmp_path / "compact", softmax_dtype="float16")
    back = load_model(tmp_path / "compact").bilm
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


def test_pretrain_refuses_a_gpu_the_machine_lacks_in_one_line(monkeypatch, tmp_path, sample_train):
    """training.device is checked as `--device` is (`runner.parse_device`): cuda:3 on a machine with one GPU
    is an error naming the setting, not a CUDA traceback from the first tensor moved there."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    args = ["pretrain", "pretrain_tiny.cfg", str(tmp_path / "out"), "--paths.train", str(sample_train)]
    done = runner.invoke(elmo_cli, [*args, "--training.device", "cuda:3"])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
    assert done.output == "error: training.device: 'cuda:3': this machine has 1 CUDA device(s), cuda:0 to cuda:0\n"
