"""Damaged model files, through the public loader: a zip archive cut or with a damaged member, an HDF5 file
with damaged internals or cut short, in every container and format, is a `ModelFileError` naming the file
(and the member), in one line, never a traceback from zipfile, zlib or h5py (io/damage.py). Damage that only
hit a weight's bytes may load: the format has no checksum (a pin catches it, tests/io/test_integrity.py)."""

import io
import random
import struct
import zipfile
from pathlib import Path

import h5py
import pytest
from typer.testing import CliRunner

import spacy_elmo
from fixture_paths import ELMO_FIXTURE, FIXTURES
from spacy_elmo.cli import elmo_cli

WEIGHTS = ELMO_FIXTURE / "lm_weights.hdf5"
EFML_MODEL = FIXTURES / "elmoformanylangs" / "word_char"
CONTAINERS = ("directory", "zip")


def bilm_tf_members(weights: bytes) -> dict[str, bytes]:
    """An NLPL-layout bilm-tf model with these weight bytes."""
    return {"model.hdf5": weights, "options.json": (ELMO_FIXTURE / "options.json").read_bytes()}


def efml_members() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(EFML_MODEL.iterdir()) if path.suffix != ".npz"}


ZIPPED = {
    "bilm-tf": (lambda: bilm_tf_members(WEIGHTS.read_bytes()), "model.hdf5"),
    "efml": (efml_members, "encoder.pkl"),
}


def zip_bytes(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def bilm_tf_model(container: str, weights: bytes, where: Path) -> tuple[Path, str]:
    """(what to load, how the weight file is named in messages) for a bilm-tf model with these weights."""
    where.mkdir()
    if container == "zip":
        archive = where / "model.zip"
        archive.write_bytes(zip_bytes(bilm_tf_members(weights), zipfile.ZIP_STORED))
        return archive, f"{archive}/model.hdf5"
    (where / "options.json").write_bytes((ELMO_FIXTURE / "options.json").read_bytes())
    (where / "lm_weights.hdf5").write_bytes(weights)
    return where, str(where / "lm_weights.hdf5")


def refused(target: Path, name: str) -> str:
    """The one-line message of the ModelFileError that loading `target` raises, which starts with `name`."""
    with pytest.raises(spacy_elmo.ModelFileError) as caught:
        spacy_elmo.load_model(target)
    message = str(caught.value)
    assert message.startswith(f"{name}: ") and "\n" not in message, message
    return message


def data_bytes(path: Path) -> set[int]:
    """The offsets of the datasets' stored values: everything else in the file is HDF5's own structure."""
    regions: list[tuple[int, int]] = []

    def visit(_: str, item: object) -> None:
        if isinstance(item, h5py.Dataset):
            regions.append((item.id.get_offset(), item.id.get_storage_size()))

    with h5py.File(path, "r") as handle:
        handle.visititems(visit)
    return {offset for start, size in regions for offset in range(start, start + size)}


def structure_at(data: bytes, signature: bytes) -> int:
    """Where the first HDF5 structure with this signature is (outside the datasets' values)."""
    inside = data_bytes(WEIGHTS)
    offset = data.find(signature)
    while offset in inside:
        offset = data.find(signature, offset + 1)
    assert offset > 0, signature
    return offset


@pytest.mark.parametrize("kind", ZIPPED)
def test_a_zip_missing_its_first_half_is_refused_naming_it(kind, tmp_path):
    """The central directory is there, but it places the members before the file's start (was OSError
    [Errno 22] from a seek, a 60-line traceback)."""
    members, _ = ZIPPED[kind]
    data = zip_bytes(members())
    archive = tmp_path / "model.zip"
    archive.write_bytes(data[len(data) // 2 :])
    assert "its beginning is missing" in refused(archive, str(archive))
    done = CliRunner().invoke(elmo_cli, ["verify", str(archive)])
    assert done.exit_code == 1 and done.output.startswith(f"error: MODEL: {archive}: not a readable zip archive"), (
        done.output
    )
    assert len(done.output.strip().splitlines()) == 1, done.output


@pytest.mark.parametrize("kind", ZIPPED)
@pytest.mark.parametrize("damage", ["local header", "compressed bytes"])
def test_a_damaged_zip_member_is_refused_naming_archive_and_member(kind, damage, tmp_path):
    members, member = ZIPPED[kind]
    data = bytearray(zip_bytes(members()))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as handle:
        info = handle.getinfo(member)
    start = info.header_offset
    if damage == "local header":  # its signature: zipfile's BadZipFile at the member's open
        data[start : start + 4] = b"XXXX"
    else:  # a zlib error or a bad CRC while it inflates
        name_length, extra_length = struct.unpack("<HH", data[start + 26 : start + 30])
        middle = start + 30 + name_length + extra_length + info.compress_size // 2
        data[middle : middle + 8] = bytes(byte ^ 0x5A for byte in data[middle : middle + 8])
    archive = tmp_path / "model.zip"
    archive.write_bytes(bytes(data))
    refused(archive, f"{archive}/{member}")


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("signature", [b"SNOD", b"TREE", b"HEAP"])
def test_an_hdf5_file_with_damaged_internals_is_refused_naming_it(container, signature, tmp_path):
    """A symbol table node, B-tree node or local heap overwritten: the file opens, iterating it fails (was
    RuntimeError: Can't iterate over symbol table ..., a 60-line traceback)."""
    data = bytearray(WEIGHTS.read_bytes())
    offset = structure_at(bytes(data), signature)
    data[offset : offset + 16] = bytes(16)
    target, name = bilm_tf_model(container, bytes(data), tmp_path / "model")
    assert "damaged" in refused(target, name)


@pytest.mark.parametrize("container", CONTAINERS)
def test_a_cut_hdf5_file_is_refused_naming_it(container, tmp_path):
    data = WEIGHTS.read_bytes()
    for cut in (0, 8, 700, len(data) // 3, len(data) // 2, len(data) - 1):
        target, name = bilm_tf_model(container, data[:cut], tmp_path / f"cut{cut}")
        refused(target, name)


def test_damage_anywhere_in_an_hdf5_file_is_refused_naming_it_or_loads(tmp_path):
    """A seeded fuzz: bursts of bytes overwritten in HDF5's structure (and a few in the values), and cuts;
    each load is a ModelFileError naming the file, or a model (damage that missed everything read)."""
    original = WEIGHTS.read_bytes()
    inside = data_bytes(WEIGHTS)
    structure = [offset for offset in range(len(original)) if offset not in inside]
    rng = random.Random(48)
    outcomes: dict[str, int] = {}
    for trial in range(48):
        data = bytearray(original)
        how = rng.choice(["structure"] * 6 + ["values", "cut"])
        if how == "cut":
            data = data[: rng.randrange(len(data))]
        else:
            start = rng.choice(structure if how == "structure" else sorted(inside))
            for offset in range(start, min(start + rng.randrange(1, 12), len(data))):
                data[offset] = rng.randrange(256)
        target, name = bilm_tf_model("directory", bytes(data), tmp_path / f"trial{trial}")
        try:
            spacy_elmo.load_model(target)
            outcome = "loaded"
        except spacy_elmo.ModelFileError as err:
            assert str(err).startswith(f"{name}: ") and "\n" not in str(err), (trial, how, str(err))
            outcome = "refused"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("loaded", 0) > 0 and outcomes.get("refused", 0) > 10, outcomes


@pytest.mark.parametrize("kind", ZIPPED)
def test_damage_anywhere_in_a_zip_archive_is_refused_naming_it_or_loads(kind, tmp_path):
    """The same over an archive's bytes (stored members: damage reaches the HDF5 file or pickle inside too)."""
    members, _ = ZIPPED[kind]
    original = zip_bytes(members(), zipfile.ZIP_STORED)
    rng = random.Random(48)
    refusals = 0
    for trial in range(16):
        data = bytearray(original)
        how = rng.choice(["bytes", "bytes", "cut", "head"])
        if how == "cut":
            data = data[: rng.randrange(len(data))]
        elif how == "head":
            data = data[rng.randrange(1, len(data)) :]
        else:
            start = rng.randrange(len(data))
            for offset in range(start, min(start + rng.randrange(1, 12), len(data))):
                data[offset] = rng.randrange(256)
        archive = tmp_path / f"trial{trial}.zip"
        archive.write_bytes(bytes(data))
        try:
            spacy_elmo.load_model(archive)
        except spacy_elmo.ModelFileError as err:
            assert str(err).startswith(f"{archive}") and "\n" not in str(err), (trial, how, str(err))
            refusals += 1
    assert refusals > 8, refusals


@pytest.mark.parametrize("cut", [True, False])
def test_a_damaged_native_model_is_refused_naming_it(reference_bilm, cut, tmp_path):
    from spacy_elmo.io.native import MODEL_FILE, save_native

    model = save_native(reference_bilm, tmp_path / "native")
    data = bytearray((model / MODEL_FILE).read_bytes())
    if cut:
        data = data[: len(data) // 2]
    else:
        data[100:108] = bytes(8)
    (model / MODEL_FILE).write_bytes(bytes(data))
    refused(model, str(model / MODEL_FILE))
