"""What loading checks beyond shapes: damaged weight values, pinned digests, the recorded source of a
conversion, and the temporaries a killed process leaves (io/digest.py, io/arrays.py, io/atomic.py)."""

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy
import pytest
from typer.testing import CliRunner

from kills import sha256_of
from spacy_elmo.cli import elmo_cli
from spacy_elmo.io.arrays import MAX_ABS_WEIGHT, WeightsError
from spacy_elmo.io.atomic import remove_stale_temporaries
from spacy_elmo.io.digest import combined_sha256, parse_pin
from spacy_elmo.io.resolve import load_bilm, load_model

runner = CliRunner()
DATASET = "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"


@pytest.fixture
def model_copy(fixture_dir, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(fixture_dir, target)
    return target


def flip_bit(path, dataset, index, bit):
    """Flip one bit of element `index` (flat) of a contiguous float32 dataset, on disk, as damage would."""
    with h5py.File(path, "r") as handle:
        offset = handle[dataset].id.get_offset()
        assert offset is not None and handle[dataset].dtype == numpy.float32
    with open(path, "r+b") as raw:
        raw.seek(offset + 4 * index + bit // 8)
        byte = raw.read(1)[0]
        raw.seek(offset + 4 * index + bit // 8)
        raw.write(bytes([byte ^ (1 << (bit % 8))]))


def test_a_flipped_exponent_bit_is_refused_by_loading_verify_and_convert(model_copy, tmp_path):
    weights = model_copy / "lm_weights.hdf5"
    flip_bit(weights, DATASET, index=5, bit=30)  # the top exponent bit: |w| ~ 0.1 becomes ~ 1e37, still finite
    with h5py.File(weights, "r") as handle:
        value = handle[DATASET][...].flat[5]
    assert numpy.isfinite(value) and abs(value) > 1e30
    with pytest.raises(WeightsError, match=rf"{weights}: dataset '{DATASET}' holds .* at \(0, 5\), beyond the 10000"):
        load_bilm(model_copy)
    verified = runner.invoke(elmo_cli, ["verify", str(model_copy)])
    assert verified.exit_code == 1 and f"dataset '{DATASET}'" in verified.output and "ok" not in verified.output
    converted = runner.invoke(elmo_cli, ["convert", str(model_copy), str(tmp_path / "native")])
    assert converted.exit_code == 1 and f"dataset '{DATASET}'" in converted.output
    assert not (tmp_path / "native").exists(), "convert gives damaged weights no fresh digest"


def test_a_nan_weight_is_refused_naming_the_dataset_and_index(model_copy):
    with h5py.File(model_copy / "lm_weights.hdf5", "a") as handle:
        handle["CNN/b_cnn_1"][3] = numpy.nan
    with pytest.raises(WeightsError, match=r"dataset 'CNN/b_cnn_1' holds a NaN or infinite value at \(3,\)"):
        load_bilm(model_copy)


def test_no_trained_elmo_comes_near_the_bound(reference_bilm):
    """The bound is far above real weights (the shipped model's largest is 14.2, the fixture's about 2)."""
    from spacy_elmo.io.arrays import bilm_arrays, weight_range
    from spacy_elmo.io.resolve import shipped_model_path

    shipped = load_bilm(shipped_model_path())
    for bilm in (reference_bilm, shipped):
        largest, _ = weight_range(bilm_arrays(bilm))
        assert 0 < largest < MAX_ABS_WEIGHT / 100


def test_verify_reports_digest_range_and_what_was_checked(fixture_dir):
    done = runner.invoke(elmo_cli, ["verify", str(fixture_dir), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    weights_sha256 = sha256_of(fixture_dir / "lm_weights.hdf5")
    assert report["sha256"] == weights_sha256 and report["sha256_of"] == "of lm_weights.hdf5"
    assert report["content_sha256"] == combined_sha256(
        {"weights": weights_sha256, "options": sha256_of(fixture_dir / "options.json")}
    )
    assert 0 < report["max_abs_weight"]["value"] < 10 and report["max_abs_weight"]["array"]
    assert any("finite" in line for line in report["checked"]) and report["converted_from"] is None
    text = runner.invoke(elmo_cli, ["verify", str(fixture_dir)]).output
    assert "weights  largest |w|" in text and "checked  " in text


def test_a_pinned_digest_is_checked_by_every_entry(fixture_dir, tmp_path):
    good = sha256_of(fixture_dir / "lm_weights.hdf5")
    bad = "0" * 64
    assert load_model(fixture_dir, sha256=good.upper()).sha256 == good  # any case
    with pytest.raises(
        ValueError, match=rf"lm_weights\.hdf5: SHA-256 {good} differs from the digest pinned by --sha256 \({bad}\)"
    ):
        load_model(fixture_dir, sha256=bad)
    with pytest.raises(ValueError, match=r"--sha256 must be a SHA-256 digest \(64 hexadecimal digits\), got 'abc'"):
        load_model(fixture_dir, sha256="abc")
    assert runner.invoke(elmo_cli, ["verify", str(fixture_dir), "--sha256", good]).exit_code == 0
    for args in (
        ["verify", str(fixture_dir), "--sha256", bad],
        ["convert", str(fixture_dir), str(tmp_path / "native"), "--sha256", bad],
        ["embed", str(fixture_dir), str(fixture_dir / "vocab_test.txt"), str(tmp_path / "out.hdf5"), "--sha256", bad],
    ):
        done = runner.invoke(elmo_cli, args)
        assert done.exit_code == 1 and f"differs from the digest pinned by --sha256 ({bad})" in done.output, args
        assert "Traceback" not in done.output
    assert not (tmp_path / "native").exists() and not list(tmp_path.glob("out.hdf5*"))


def test_the_pipe_checks_a_pinned_digest_at_initialize(fixture_dir):
    import spacy

    good = sha256_of(fixture_dir / "lm_weights.hdf5")
    for pin, ok in ((good, True), ("f" * 64, False)):
        nlp = spacy.blank("en")
        model = {"@architectures": "spacy-elmo.BiLM.v1", "path": str(fixture_dir), "sha256": pin}
        nlp.add_pipe("elmo", config={"model": model})
        if ok:
            nlp.initialize()
            assert nlp("a b")._.elmo.shape == (2, 32)
        else:
            with pytest.raises(
                ValueError, match=r"differs from the digest pinned by spacy-elmo\.BiLM\.v1 model\.sha256"
            ):
                nlp.initialize()
    with pytest.raises(ValueError, match=r"model\.sha256 must be a SHA-256 digest"):
        spacy.blank("en").add_pipe(
            "elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(fixture_dir), "sha256": "12"}}
        )


def test_convert_records_the_source_both_ways(fixture_dir, tmp_path):
    source_sha256 = sha256_of(fixture_dir / "lm_weights.hdf5")
    assert runner.invoke(elmo_cli, ["convert", str(fixture_dir), str(tmp_path / "native")]).exit_code == 0
    report = json.loads(runner.invoke(elmo_cli, ["verify", str(tmp_path / "native"), "--json"]).output)
    assert report["converted_from"] == {"format": "bilm-tf", "file": "lm_weights.hdf5", "sha256": source_sha256}
    text = runner.invoke(elmo_cli, ["verify", str(tmp_path / "native")]).output
    assert f"converted from bilm-tf lm_weights.hdf5, sha256 {source_sha256}" in text
    assert runner.invoke(elmo_cli, ["convert", str(tmp_path / "native"), str(tmp_path / "back")]).exit_code == 0
    with h5py.File(tmp_path / "back" / "weights.hdf5", "r") as handle:
        assert handle.attrs["spacy_elmo_source_format"] == "native"
        assert handle.attrs["spacy_elmo_source_sha256"] == report["sha256"]


def test_a_pin_is_normalized_or_refused_naming_the_option():
    assert parse_pin(None, "--sha256") is None and parse_pin("", "--sha256") is None
    assert parse_pin(" " + "AB" * 32 + "\n", "--sha256") == "ab" * 32
    for bad in ("g" * 64, "a" * 63, 12):
        with pytest.raises(ValueError, match="--sha256 must be a SHA-256 digest"):
            parse_pin(bad, "--sha256")


def test_only_the_temporaries_of_dead_processes_are_removed(tmp_path):
    target = tmp_path / "out.hdf5"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"out.hdf5.tmp{int(dead.stdout)}"
    stale.write_bytes(b"half")
    live = tmp_path / f"out.hdf5.tmp{os.getpid()}"  # this process may still be writing it
    live.write_bytes(b"mine")
    other = tmp_path / "other.hdf5.tmp1"
    other.write_bytes(b"not ours")
    assert remove_stale_temporaries(target) == [stale]
    assert not stale.exists() and live.exists() and other.exists()
