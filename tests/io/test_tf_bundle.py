"""TensorFlow checkpoints (tensor bundles) read without TensorFlow: every variable as TensorFlow saved it
(tests/fixtures/tfhub, made by TensorFlow itself), damage refused naming the file and the variable."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy
import pytest

from fixture_paths import FIXTURES
from spacy_elmo.errors import ModelFileError
from spacy_elmo.io.crc32c import masked_crc32c
from spacy_elmo.io.protobuf import varint
from spacy_elmo.io.tf_bundle import FOOTER_BYTES, BundleError, TensorBundle

TFHUB = FIXTURES / "tfhub"
MANIFEST = json.loads((TFHUB / "manifest.json").read_text(encoding="utf-8"))
GOOGLE = "google/variables/variables"


def sha256(array: numpy.ndarray) -> str:
    return hashlib.sha256(numpy.ascontiguousarray(array).tobytes()).hexdigest()


@pytest.mark.parametrize("prefix", sorted(MANIFEST["bundles"]))
def test_every_variable_reads_as_tensorflow_saved_it(prefix: str) -> None:
    saved = MANIFEST["bundles"][prefix]
    with TensorBundle.open(TFHUB / prefix) as bundle:
        assert sorted(bundle.entries) == sorted(saved)
        for name, record in saved.items():
            entry = bundle.entries[name]
            assert (list(entry.shape), entry.dtype) == (record["shape"], record["dtype"]), name
            if name == "partitioned":  # TensorFlow assembles its slices; this reader refuses it, saying so
                with pytest.raises(BundleError, match=r"variable 'partitioned' is stored partitioned into 3 slices"):
                    bundle.read(name)
            elif "sha256" not in record:  # bfloat16, strings: numpy cannot hold them as stored
                with pytest.raises(
                    BundleError, match=rf"variables\.index: variable '{name}' has dtype {record['dtype']}"
                ):
                    bundle.read(name)
            else:
                value = bundle.read(name)
                assert (value.dtype.name, list(value.shape)) == (record["dtype"], record["shape"]), name
                assert sha256(value) == record["sha256"], name


def test_a_two_shard_checkpoint_reads_both_shards() -> None:
    with TensorBundle.open(TFHUB / "dtypes" / "variables") as bundle:
        assert bundle.n_shards == 2
        assert {entry.shard for entry in bundle.entries.values()} == {0, 1}


@pytest.fixture
def module_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TFHUB / "google", tmp_path / "google")) / "variables" / "variables"


def test_a_truncated_shard_is_refused_naming_it_and_the_variable(module_copy: Path) -> None:
    data = Path(f"{module_copy}.data-00000-of-00001")
    with TensorBundle.open(module_copy) as bundle:
        by_offset = sorted(bundle.entries.values(), key=lambda entry: entry.offset)
    first, last = by_offset[0].name, by_offset[-1].name
    data.write_bytes(data.read_bytes()[:-10])
    with TensorBundle.open(module_copy) as bundle:
        bundle.read(first)  # what lies before the cut still reads
        with pytest.raises(BundleError, match=rf"data-00000-of-00001: variable '{last}' needs bytes .* truncated"):
            bundle.read(last)


def test_a_flipped_bit_fails_the_tensors_crc(module_copy: Path) -> None:
    data = Path(f"{module_copy}.data-00000-of-00001")
    with TensorBundle.open(module_copy) as bundle:
        entry = bundle.entries["bilm/CNN_proj/W_proj"]
    damaged = bytearray(data.read_bytes())
    damaged[entry.offset + 5] ^= 0x01  # a low mantissa bit: the value stays in range
    data.write_bytes(bytes(damaged))
    with TensorBundle.open(module_copy) as bundle:
        with pytest.raises(
            BundleError, match=r"data-00000-of-00001: variable 'bilm/CNN_proj/W_proj' fails its CRC-32C"
        ):
            bundle.read("bilm/CNN_proj/W_proj")


def test_a_bad_footer_magic_is_refused_naming_the_index(module_copy: Path) -> None:
    index = Path(f"{module_copy}.index")
    index.write_bytes(index.read_bytes()[:-1] + b"\x00")
    with pytest.raises(BundleError, match=r"variables\.index: the footer's magic number is .* not a TensorFlow table"):
        TensorBundle.open(module_copy)
    index.write_bytes(b"\x00" * 10)
    with pytest.raises(BundleError, match=r"variables\.index: 10 bytes, shorter than a table's footer"):
        TensorBundle.open(module_copy)


def first_block(index: bytes) -> tuple[int, int]:
    """(offset, size) of the table's first data block, read from the footer's index handle."""
    footer = memoryview(index)[len(index) - FOOTER_BYTES :]
    _, pos = varint(footer, 0)
    _, pos = varint(footer, pos)  # the metaindex handle
    index_offset, pos = varint(footer, pos)
    block = memoryview(index)[index_offset:]
    pos = 0
    for _ in range(3):  # the index block's first entry: shared, unshared, value size
        value, pos = varint(block, pos)
        if _ == 1:
            unshared = value
    pos += unshared
    offset, pos = varint(block, pos)
    size, _ = varint(block, pos)
    return offset, size


def test_a_damaged_or_compressed_index_block_is_refused(module_copy: Path) -> None:
    index = Path(f"{module_copy}.index")
    original = index.read_bytes()
    offset, size = first_block(original)
    damaged = bytearray(original)
    damaged[offset + 3] ^= 0x40
    index.write_bytes(bytes(damaged))
    with pytest.raises(BundleError, match=r"variables\.index: the index block at byte 0 fails its CRC-32C"):
        TensorBundle.open(module_copy)
    snappy = bytearray(original)
    snappy[offset + size] = 1  # the block's type: snappy, with a CRC that matches
    snappy[offset + size + 1 : offset + size + 5] = masked_crc32c(bytes(snappy[offset : offset + size + 1])).to_bytes(
        4, "little"
    )
    index.write_bytes(bytes(snappy))
    with pytest.raises(BundleError, match=r"snappy-compressed; only uncompressed blocks .* are supported"):
        TensorBundle.open(module_copy)


def test_a_missing_shard_is_named(module_copy: Path) -> None:
    Path(f"{module_copy}.data-00000-of-00001").unlink()
    with TensorBundle.open(module_copy) as bundle:
        with pytest.raises(FileNotFoundError, match=r"variables\.data-00000-of-00001: missing"):
            bundle.read("bilm/char_embed")
    with pytest.raises(KeyError, match="no variable 'nothing'"):
        bundle.read("nothing")
    assert issubclass(BundleError, ModelFileError)
