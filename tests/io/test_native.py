"""The native format's digest: a damaged file is an error naming it, never silently other vectors."""

import numpy
import pytest
import srsly

from spacy_elmo.errors import reading
from spacy_elmo.io.arrays import WeightsError, bilm_arrays
from spacy_elmo.io.native import DIGEST_KEY, MODEL_FILE, bilm_from_bytes, bilm_to_bytes, save_native
from spacy_elmo.io.resolve import load_model, shipped_model_path


def flip_bit_inside(data: bytes, array: numpy.ndarray) -> bytes:
    """`data` with one bit flipped in the middle of where `array`'s bytes are stored."""
    raw = array.tobytes()
    start = data.find(raw)
    assert start >= 0 and data.find(raw, start + 1) < 0, "the array's bytes should occur once"
    position = start + len(raw) // 2
    return data[:position] + bytes([data[position] ^ 0x10]) + data[position + 1 :]


def test_a_flipped_bit_in_a_weight_array_is_refused_naming_the_file(reference_bilm, tmp_path):
    save_native(reference_bilm, tmp_path / "model")
    path = tmp_path / "model" / MODEL_FILE
    weights = dict(bilm_arrays(reference_bilm))
    path.write_bytes(flip_bit_inside(path.read_bytes(), weights["CNN_proj/W_proj"]))
    with pytest.raises(WeightsError, match=rf"{path}: the model file is corrupt: its contents have SHA-256"):
        load_model(tmp_path / "model")
    with pytest.raises(WeightsError, match="corrupt"):
        load_model(tmp_path / "model")


def test_an_edited_vocabulary_is_refused(make_bilm):
    bilm = make_bilm(n_tokens_vocab=4)
    bilm.vocab = ["<S>", "</S>", "<UNK>", "bank"]
    data = bilm_to_bytes(bilm)
    edited = data.replace(b"bank", b"bonk")
    assert edited != data
    with pytest.raises(WeightsError, match="^edited.msgpack: the model file is corrupt"), reading("edited.msgpack"):
        bilm_from_bytes(edited)


@pytest.mark.parametrize("damage", ["absent", "truncated", "not a string"])
def test_a_file_without_a_valid_digest_field_is_refused(reference_bilm, damage):
    """A damaged digest field must not read as "no digest recorded": nothing loads unchecked."""
    payload = srsly.msgpack_loads(bilm_to_bytes(reference_bilm))
    if damage == "absent":
        del payload[DIGEST_KEY]
    elif damage == "truncated":
        payload[DIGEST_KEY] = payload[DIGEST_KEY][:-1]
    else:
        payload[DIGEST_KEY] = 12345
    with pytest.raises(WeightsError, match="^the model file records no valid SHA-256 digest"):
        bilm_from_bytes(srsly.msgpack_dumps(payload))


def test_bytes_round_trip_bit_for_bit(reference_bilm):
    loaded = bilm_from_bytes(bilm_to_bytes(reference_bilm))
    for (name, a), (_, b) in zip(bilm_arrays(reference_bilm), bilm_arrays(loaded)):
        assert numpy.array_equal(a, b), name


def test_the_shipped_model_carries_a_digest_that_checks():
    payload = srsly.msgpack_loads((shipped_model_path() / MODEL_FILE).read_bytes())
    assert len(payload[DIGEST_KEY]) == 64
    load_model(shipped_model_path())


def test_one_writer_for_full_and_compact_models(make_bilm, tmp_path):
    bilm = make_bilm(n_tokens_vocab=5)
    bilm.vocab = ["<S>", "</S>", "<UNK>", "a", "b"]
    full = load_model(save_native(bilm, tmp_path / "full")).bilm
    compact = load_model(save_native(bilm, tmp_path / "compact", softmax_dtype="float16")).bilm
    bare = load_model(save_native(bilm, tmp_path / "bare", keep_softmax=False)).bilm
    original = dict(bilm_arrays(bilm))
    for name, value in bilm_arrays(full):
        assert numpy.array_equal(value, original[name]), name
    compact_arrays = dict(bilm_arrays(compact))
    half = original["softmax/W"].astype(numpy.float16).astype(numpy.float32)
    assert numpy.array_equal(compact_arrays["softmax/W"], half)
    assert numpy.array_equal(compact_arrays["CNN_proj/W_proj"], original["CNN_proj/W_proj"])
    assert compact.vocab == bilm.vocab
    assert bare.softmax is None and bare.vocab is None and bare.options.n_tokens_vocab == 0
    assert "softmax/W" not in dict(bilm_arrays(bare))


def test_an_edited_options_json_beside_a_native_model_is_an_error_naming_it(reference_bilm, tmp_path):
    """options.json is a readable copy; the model file is what loads. An edit used to be ignored."""
    import json

    directory = save_native(reference_bilm, tmp_path / "model")
    options = json.loads((directory / "options.json").read_text())
    options["lstm"]["projection_dim"] = 256
    (directory / "options.json").write_text(json.dumps(options))
    pattern = (  # the one file named once, and the copy's own remedy (not the model file's)
        rf"^{directory / 'options.json'}: differs from the options stored in .*model.msgpack at 'lstm.projection_dim'"
        r".*retrain/convert for new options$"
    )
    with pytest.raises(WeightsError, match=pattern):
        load_model(directory)
    (directory / "options.json").unlink()  # the copy is optional: the model file is the source of truth
    assert load_model(directory).bilm.options.projection_dim == reference_bilm.options.projection_dim


def test_a_truncated_or_foreign_file_is_an_error_naming_it(reference_bilm, tmp_path):
    directory = save_native(reference_bilm, tmp_path / "model")
    data = (directory / MODEL_FILE).read_bytes()
    (directory / MODEL_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="model.msgpack: not a spacy-elmo model"):
        load_model(directory)
    (directory / MODEL_FILE).write_bytes(b"\x93garbage")
    with pytest.raises(WeightsError, match=rf"{directory / MODEL_FILE}: not a spacy-elmo model"):
        load_model(directory)


def test_a_round_trip_keeps_every_array_and_its_digest_differs_only_by_the_conversion_record(fixture_dir, tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import elmo_cli
    from spacy_elmo.io.native import SOURCE_KEY, payload_digest

    for args in (
        [fixture_dir, tmp_path / "first"],
        [tmp_path / "first", tmp_path / "exported", "--to", "bilm-tf"],
        [tmp_path / "exported", tmp_path / "again"],
    ):
        done = CliRunner().invoke(elmo_cli, ["convert", *map(str, args)])
        assert done.exit_code == 0, done.output
    first, again = load_model(tmp_path / "first"), load_model(tmp_path / "again")
    for (name, a), (_, b) in zip(bilm_arrays(first.bilm), bilm_arrays(again.bilm)):
        assert a.dtype == b.dtype and numpy.array_equal(a, b), name
    assert first.sha256 != again.sha256 and "converted from" in again.sha256_of
    assert first.converted_from["format"] == again.converted_from["format"] == "bilm-tf"
    assert first.converted_from["sha256"] != again.converted_from["sha256"]  # the export is another file
    payloads = [srsly.msgpack_loads((tmp_path / n / MODEL_FILE).read_bytes()) for n in ("first", "again")]
    assert all(p[SOURCE_KEY] for p in payloads)
    without_record = [
        payload_digest(p["options"], p["weights"], p.get("vocab"), None, p.get("lexicon")) for p in payloads
    ]
    assert without_record[0] == without_record[1]  # the stored model is the same; its provenance is not
