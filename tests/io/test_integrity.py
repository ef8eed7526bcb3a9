"""What loading checks beyond shapes: damaged weight values, pinned digests, the recorded source of a
conversion, and the temporaries a killed process leaves (io/digest.py, io/arrays.py, disk.py)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile

import h5py
import numpy
import pytest
from typer.testing import CliRunner

from fixture_paths import FIXTURES
from kills import sha256_of
from spacy_elmo.cli import elmo_cli
from spacy_elmo.disk import remove_stale_temporaries
from spacy_elmo.errors import SettingError, named_settings
from spacy_elmo.io.arrays import MAX_ABS_WEIGHT, WeightsError, bilm_arrays
from spacy_elmo.io.digest import parse_pin
from spacy_elmo.io.native import save_native
from spacy_elmo.io.resolve import load_model

runner = CliRunner()
DATASET = "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"
EFML_CHAR_ONLY = FIXTURES / "elmoformanylangs" / "char_only"


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
        load_model(model_copy)
    verified = runner.invoke(elmo_cli, ["verify", str(model_copy)])
    assert verified.exit_code == 1 and f"dataset '{DATASET}'" in verified.output and "ok" not in verified.output
    converted = runner.invoke(elmo_cli, ["convert", str(model_copy), str(tmp_path / "native")])
    assert converted.exit_code == 1 and f"dataset '{DATASET}'" in converted.output
    assert not (tmp_path / "native").exists(), "convert gives damaged weights no fresh digest"


def test_a_nan_weight_is_refused_naming_the_dataset_and_index(model_copy):
    with h5py.File(model_copy / "lm_weights.hdf5", "a") as handle:
        handle["CNN/b_cnn_1"][3] = numpy.nan
    with pytest.raises(WeightsError, match=r"dataset 'CNN/b_cnn_1' holds a NaN or infinite value at \(3,\)"):
        load_model(model_copy)


def test_no_trained_elmo_comes_near_the_bound(reference_bilm):
    """The bound is far above real weights (the shipped model's largest is 14.2, the fixture's about 2)."""
    from spacy_elmo.io.arrays import bilm_arrays, weight_range
    from spacy_elmo.io.resolve import shipped_model_path

    shipped = load_model(shipped_model_path()).bilm
    for bilm in (reference_bilm, shipped):
        largest, _ = weight_range(bilm_arrays(bilm))
        assert 0 < largest < MAX_ABS_WEIGHT / 100


def fixture_model_digest(directory):
    """The model digest of a bilm-tf directory, computed here from the definition in io/digest.py: SHA-256
    of "role:sha256" lines, sorted by role, over options.json, the weights and (if any) vocab.txt."""
    parts = {"options": directory / "options.json", "weights": directory / "lm_weights.hdf5"}
    if (directory / "vocab.txt").exists():
        parts["vocab"] = directory / "vocab.txt"
    listing = "".join(f"{role}:{sha256_of(parts[role])}\n" for role in sorted(parts))
    return hashlib.sha256(listing.encode()).hexdigest()


def test_verify_reports_digest_range_and_what_was_checked(fixture_dir):
    done = runner.invoke(elmo_cli, ["verify", str(fixture_dir), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["sha256"] == fixture_model_digest(fixture_dir) and "content_sha256" not in report  # one name
    assert report["sha256_of"] == "the model digest, over options.json, lm_weights.hdf5"
    assert 0 < report["max_abs_weight"]["value"] < 10 and report["max_abs_weight"]["array"]
    assert any("finite" in line for line in report["checked"]) and report["converted_from"] is None
    text = runner.invoke(elmo_cli, ["verify", str(fixture_dir)]).output
    assert "weights  largest |w|" in text and "checked  " in text


def test_verify_prints_the_digest_to_pin_and_each_files_own(fixture_dir):
    report = json.loads(runner.invoke(elmo_cli, ["verify", str(fixture_dir), "--json"]).output)
    assert report["files"] == [
        {"role": role, "path": str(fixture_dir / name), "sha256": sha256_of(fixture_dir / name)}
        for role, name in (("options", "options.json"), ("weights", "lm_weights.hdf5"))
    ]
    text = runner.invoke(elmo_cli, ["verify", str(fixture_dir)]).output.splitlines()
    assert f"sha256   {report['sha256']} (the model digest, over options.json, lm_weights.hdf5): the digest to pin" in (
        "\n".join(text)
    )
    for file in report["files"]:
        assert f"file     {file['sha256']} {file['role']}: {file['path']}" in text
    assert any(line.startswith("note     bilm-tf files carry no checksum") for line in text)
    pinned = runner.invoke(elmo_cli, ["verify", str(fixture_dir), "--sha256", report["sha256"]]).output
    assert "note " not in pinned and pinned.rstrip().endswith("ok")


def test_a_pin_covers_the_options_and_the_vocabulary(model_copy):
    """The weights unchanged, an edited options.json (relu to tanh, a clip) or vocab.txt under a pin is
    refused: the pin is the model's digest, over every file of it."""
    (model_copy / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n", encoding="utf-8")
    report = json.loads(runner.invoke(elmo_cli, ["verify", str(model_copy), "--json"]).output)
    pin = report["sha256"]
    assert pin == fixture_model_digest(model_copy) and [f["role"] for f in report["files"]] == [
        "options",
        "weights",
        "vocab",
    ]
    original = (model_copy / "options.json").read_text(encoding="utf-8")
    edits = {
        "options.json": (original.replace('"relu"', '"tanh"'), original.replace('"cell_clip": 3', '"cell_clip": 4')),
        "vocab.txt": ("<S>\n</S>\n<UNK>\nthat\n",),
    }
    for name, texts in edits.items():
        before = (model_copy / name).read_text(encoding="utf-8")
        for text in texts:
            assert text != before
            (model_copy / name).write_text(text, encoding="utf-8")
            assert load_model(model_copy).sha256 != pin  # it loads unpinned (another model) ...
            with pytest.raises(
                ValueError, match=rf"^sha256: {model_copy}: SHA-256 [0-9a-f]{{64}} differs from the pinned digest"
            ):
                load_model(model_copy, sha256=pin)  # ... and never under the pin
            done = runner.invoke(elmo_cli, ["verify", str(model_copy), "--sha256", pin])
            assert (
                done.exit_code == 1
                and done.output.startswith("error: --sha256: ")
                and f"the pinned digest ({pin})" in done.output
            )
        (model_copy / name).write_text(before, encoding="utf-8")
    assert load_model(model_copy, sha256=pin).sha256 == pin


def test_a_pin_of_the_weight_file_alone_is_refused_naming_the_model_digest(model_copy, tmp_path):
    """A pin made before the model digest (the .hdf5 file's SHA-256) is refused, not accepted: it cannot
    cover the options beside the weights, and a warning would let an edited options.json load."""
    weights_pin = sha256_of(model_copy / "lm_weights.hdf5")
    digest = fixture_model_digest(model_copy)
    message = (
        rf"{model_copy}: the pin {weights_pin} is the SHA-256 of {model_copy / 'lm_weights.hdf5'} alone; a pin "
        rf"must be the digest of the whole model \(options\.json, lm_weights\.hdf5\).* pin {digest} instead"
    )
    with pytest.raises(ValueError, match=message):
        load_model(model_copy, sha256=weights_pin)
    for args in (
        ["verify", str(model_copy), "--sha256", weights_pin],
        ["convert", str(model_copy), str(tmp_path / "native"), "--sha256", weights_pin],
        [
            "embed",
            str(model_copy),
            str(model_copy / "vocab_test.txt"),
            str(tmp_path / "o.hdf5"),
            "--sha256",
            weights_pin,
        ],
    ):
        done = runner.invoke(elmo_cli, args)
        assert done.exit_code == 1 and f"pin {digest} instead" in done.output, args
        errors = [line for line in done.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and f"pin {digest} instead" in errors[0] and "Traceback" not in done.output, args
    assert not (tmp_path / "native").exists() and not list(tmp_path.glob("o.hdf5*"))
    with pytest.raises(
        ValueError,
        match=rf"^spacy-elmo\.BiLM\.v1 model\.sha256: .*the pin {weights_pin} is the SHA-256 of .* {digest} instead",
    ):
        pipe_with_pin(model_copy, weights_pin).initialize()


def test_a_flip_of_the_lowest_exponent_bit_is_refused_only_under_a_pin(model_copy):
    """HDF5 has no checksum: a weight doubled or halved (the lowest exponent bit flipped) is finite and in
    range, so it loads unpinned (the format's limit, stated here); pinned, it is refused."""
    pin = fixture_model_digest(model_copy)
    weights = model_copy / "lm_weights.hdf5"
    with h5py.File(weights, "r") as handle:
        before = handle[DATASET][...].flat[5]
    flip_bit(weights, DATASET, index=5, bit=23)
    with h5py.File(weights, "r") as handle:
        after = handle[DATASET][...].flat[5]
    assert after in (2 * before, before / 2)
    unpinned = load_model(model_copy)
    assert unpinned.sha256 != pin
    loaded = dict(bilm_arrays(unpinned.bilm))[DATASET].flat[5]
    assert loaded == after  # the limit: nothing in the file tells the damage apart from a real weight
    with pytest.raises(ValueError, match=rf"{model_copy}: SHA-256 {unpinned.sha256} differs from the pinned digest"):
        load_model(model_copy, sha256=pin)
    done = runner.invoke(elmo_cli, ["verify", str(model_copy), "--sha256", pin])
    assert done.exit_code == 1 and "ok" not in done.output


def test_a_model_in_a_zip_has_the_digest_of_the_unzipped_one_and_its_pin_covers_the_options(model_copy, tmp_path):
    pin = fixture_model_digest(model_copy)
    archive = tmp_path / "model.zip"

    def pack(options_text):
        with zipfile.ZipFile(archive, "w") as handle:
            handle.write(model_copy / "lm_weights.hdf5", "elmo/model.hdf5")
            handle.writestr("elmo/options.json", options_text)

    options = (model_copy / "options.json").read_text(encoding="utf-8")
    pack(options)
    assert load_model(archive, sha256=pin).sha256 == pin
    pack(options.replace('"relu"', '"tanh"'))
    with pytest.raises(ValueError, match=rf"{archive}: SHA-256 [0-9a-f]{{64}} differs from the pinned digest"):
        load_model(archive, sha256=pin)
    with pytest.raises(ValueError, match=rf"the SHA-256 of {archive}/elmo/model\.hdf5 alone"):
        load_model(archive, sha256=sha256_of(model_copy / "lm_weights.hdf5"))


def test_an_elmoformanylangs_pin_covers_an_architecture_json_in_a_folder(tmp_path):
    """config.json may name its architecture JSON in a folder of the model: the digest covers the files
    that reading the model took, wherever they are."""
    model = tmp_path / "efml"
    shutil.copytree(EFML_CHAR_ONLY, model)
    (model / "arch").mkdir()
    name = "cnn_0_5_20_8_fixture.json"
    (model / name).rename(model / "arch" / name)
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    config["config_path"] = f"arch/{name}"
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    pin = load_model(model).sha256
    architecture = (model / "arch" / name).read_text(encoding="utf-8")
    assert '"tanh"' in architecture
    (model / "arch" / name).write_text(architecture.replace('"tanh"', '"relu"'), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{model}: SHA-256 [0-9a-f]{{64}} differs from the pinned digest"):
        load_model(model, sha256=pin)
    assert f"arch/{name}" in {file.role for file in load_model(model).files}


@pytest.mark.parametrize(
    "name, architecture, words",
    [("word_char", "cnn_12_6_24_10_fixture.json", True), ("char_only", "cnn_0_5_20_8_fixture.json", False)],
)
def test_an_elmoformanylangs_digest_covers_exactly_the_files_reading_reads(tmp_path, name, architecture, words):
    """config.json, the architecture JSON, char.dic, word.dic when the model has word embeddings, and the
    two state dicts: other files beside them (the fixture's efml_ids.json, notes) change nothing, so the
    directory and a zip of the model files alone have one digest, and a pin of one loads the other."""
    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "elmoformanylangs" / name, model)
    read = {"config.json", architecture, "char.dic", "token_embedder.pkl", "encoder.pkl"} | (
        {"word.dic"} if words else set()
    )
    loaded = load_model(model)
    assert {file.role for file in loaded.files} == read
    assert {file.path for file in loaded.files} == {str(model / role) for role in read}
    assert (model / "efml_ids.json").is_file() and (model / "word.dic").is_file()
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for role in sorted(read):
            handle.write(model / role, role)
    assert load_model(archive, sha256=loaded.sha256).sha256 == loaded.sha256
    (model / "notes.json").write_text('{"trained on": "a corpus"}', encoding="utf-8")
    (model / "efml_ids.json").write_text("[]", encoding="utf-8")
    if not words:  # char_only's word.dic is not read (word_dim is 0), as ELMoForManyLangs does not read it
        (model / "word.dic").write_text("other\t0\n", encoding="utf-8")
    assert load_model(model, sha256=loaded.sha256).sha256 == loaded.sha256
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    (model / "config.json").write_text(json.dumps({**config, "note": "edited"}), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{model}: SHA-256 [0-9a-f]{{64}} differs from the pinned digest"):
        load_model(model, sha256=loaded.sha256)  # every file reading reads is covered, config.json's keys too


def test_a_pinned_digest_is_checked_by_every_entry(fixture_dir, tmp_path):
    good = fixture_model_digest(fixture_dir)
    bad = "0" * 64
    assert load_model(fixture_dir, sha256=good.upper()).sha256 == good  # any case
    with pytest.raises(
        ValueError, match=rf"^sha256: {fixture_dir}: SHA-256 {good} differs from the pinned digest \({bad}\)"
    ):
        load_model(fixture_dir, sha256=bad)
    with pytest.raises(ValueError, match=r"^sha256: 'abc' is not a SHA-256 digest \(64 hexadecimal digits\)"):
        load_model(fixture_dir, sha256="abc")
    assert runner.invoke(elmo_cli, ["verify", str(fixture_dir), "--sha256", good]).exit_code == 0
    for args in (
        ["verify", str(fixture_dir), "--sha256", bad],
        ["convert", str(fixture_dir), str(tmp_path / "native"), "--sha256", bad],
        ["embed", str(fixture_dir), str(fixture_dir / "vocab_test.txt"), str(tmp_path / "out.hdf5"), "--sha256", bad],
    ):
        done = runner.invoke(elmo_cli, args)
        assert (
            done.exit_code == 1
            and f"error: --sha256: {fixture_dir}: SHA-256 {good} differs from the pinned digest ({bad})" in done.output
        ), args
        assert "Traceback" not in done.output
    assert not (tmp_path / "native").exists() and not list(tmp_path.glob("out.hdf5*"))


def test_a_load_checks_its_pin_once(fixture_dir, tmp_path, monkeypatch):
    """Before the weights are parsed where the files a pin covers are known first (bilm-tf), else after."""
    from spacy_elmo.io import resolve

    native = tmp_path / "native"
    save_native(load_model(fixture_dir).bilm, native)
    checked = []
    monkeypatch.setattr(resolve, "check_pin", lambda actual, *args: checked.append(actual))
    for model in (fixture_dir, native):
        loaded = load_model(model, sha256="0" * 64)
        assert checked.pop() == loaded.sha256 and not checked


def pipe_with_pin(path, pin):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(path), "sha256": pin}})
    return nlp


def test_the_pipe_checks_a_pinned_digest_at_initialize(fixture_dir):
    import spacy

    for pin, ok in ((fixture_model_digest(fixture_dir), True), ("f" * 64, False)):
        nlp = pipe_with_pin(fixture_dir, pin)
        if ok:
            nlp.initialize()
            assert nlp("a b")._.elmo.shape == (2, 32)
        else:
            with pytest.raises(
                ValueError, match=r"^spacy-elmo\.BiLM\.v1 model\.sha256: .* differs from the pinned digest"
            ):
                nlp.initialize()
    with pytest.raises(ValueError, match=r"^spacy-elmo\.BiLM\.v1 model\.sha256: .* is not a SHA-256 digest"):
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
    assert parse_pin(None) is None and parse_pin("") is None
    assert parse_pin(" " + "AB" * 32 + "\n") == "ab" * 32
    for bad in ("g" * 64, "a" * 63, 12):
        with pytest.raises(SettingError, match="is not a SHA-256 digest") as refused:
            parse_pin(bad)
        assert refused.value.setting == "sha256"
        with (
            pytest.raises(SettingError, match="^--sha256: .* is not a SHA-256 digest"),
            named_settings(sha256="--sha256"),
        ):
            parse_pin(bad)


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
