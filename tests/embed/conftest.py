"""Damaging an HDF5 file the way a disk or a careless edit does: one bit of a dataset's stored data."""

import h5py
import pytest


def flip_bit(path, dataset: str, at: int = 5, mask: int = 0x10) -> None:
    """Flip bits `mask` of byte `at` of `dataset`'s data in the file (stored contiguously, as h5py writes
    a dataset given whole), leaving the file's structure and attributes as they are."""
    with h5py.File(path, "r") as handle:
        offset = handle[dataset].id.get_offset()
    with open(path, "r+b") as raw:
        raw.seek(offset + at)
        byte = raw.read(1)
        raw.seek(offset + at)
        raw.write(bytes([byte[0] ^ mask]))


@pytest.fixture
def flip_a_bit():
    return flip_bit


@pytest.fixture
def text_file(request, tmp_path):
    """The requesting module's LINES as an input file, one a line (UTF-8)."""
    path = tmp_path / "input.txt"
    path.write_text("\n".join(request.module.LINES) + "\n", encoding="utf-8")
    return path
