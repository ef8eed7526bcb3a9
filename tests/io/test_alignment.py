"""Alignment matrices read without unpickling: torch.save's zip and legacy layouts, a tensor or a numpy array,
the same numbers bit for bit; a pickle naming any other global refused unrun; applied as AllenNLP applies
them (x @ M.T, on every layer alike)."""

import io
import pickle
import zipfile

import numpy
import pytest

from fixture_paths import FIXTURES
from spacy_elmo.errors import ModelFileError
from spacy_elmo.io.alignment import LEGACY_MAGIC, LEGACY_PROTOCOL, AlignmentError, align_layers, read_alignment

ALIGNMENT = FIXTURES / "alignment"
EXPECTED = numpy.frombuffer((ALIGNMENT / "matrix.f32le").read_bytes(), dtype="<f4").reshape(8, 8)


def proto2(body: bytes) -> bytes:
    return b"\x80\x02" + body + b"."


def legacy(object_pickle: bytes, keys: bytes = proto2(b"]")) -> bytes:
    """A legacy torch.save file around `object_pickle` (magic, protocol, system info, object, keys)."""
    header = [pickle.dumps(LEGACY_MAGIC, 2), pickle.dumps(LEGACY_PROTOCOL, 2), pickle.dumps({"little_endian": True}, 2)]
    return b"".join(header) + object_pickle + keys


def zip_layout(data_pkl: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("m/data.pkl", data_pkl)
        archive.writestr("m/byteorder", "little")
    return buffer.getvalue()


@pytest.mark.parametrize("name", ["tensor_zip", "tensor_legacy", "numpy_legacy"])
def test_each_layout_gives_the_same_float32_numbers_bit_for_bit(name):
    matrix = read_alignment(ALIGNMENT / f"{name}.pth")[0]
    assert matrix.dtype == numpy.float32 and matrix.shape == (8, 8) and matrix.flags.c_contiguous
    assert matrix.tobytes() == EXPECTED.astype(numpy.float32).tobytes()


def test_a_float64_array_stays_float64():
    matrix = read_alignment(ALIGNMENT / "numpy64_zip.pth")[0]
    assert matrix.dtype == numpy.float64 and numpy.array_equal(matrix, EXPECTED.astype(numpy.float64))


def os_system_call(marker) -> bytes:
    """A pickle that, unpickled, would run `touch marker` (GLOBAL os system, REDUCE): built by hand."""
    command = f"touch {marker}".encode()
    return proto2(b"cos\nsystem\n(X" + len(command).to_bytes(4, "little") + command + b"tR")


@pytest.mark.parametrize("layout", ["legacy", "zip"])
def test_a_pickle_naming_another_global_is_refused_and_nothing_runs(tmp_path, layout):
    marker = tmp_path / "ran"
    evil = os_system_call(marker)
    path = tmp_path / f"{layout}_best_mapping.pth"
    path.write_bytes(legacy(evil) if layout == "legacy" else zip_layout(evil))
    with pytest.raises(AlignmentError, match=rf"{path}: names os\.system, which an alignment matrix never does"):
        read_alignment(path)
    assert not marker.exists()


def test_builtins_and_other_objects_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "eval.pth"
    path.write_bytes(legacy(proto2(b"cbuiltins\neval\n(X\x01\x00\x00\x001tR")))
    with pytest.raises(AlignmentError, match=r"eval\.pth: names builtins\.eval"):
        read_alignment(path)
    path.write_bytes(legacy(pickle.dumps([[1.0, 0.0], [0.0, 1.0]], 2)))  # a list, not a tensor or array
    with pytest.raises(AlignmentError, match=r"eval\.pth: holds list, not a float tensor or array"):
        read_alignment(path)


def test_only_a_square_float_matrix_is_taken(tmp_path):
    torch = pytest.importorskip("torch")
    for value, why in (
        (torch.zeros(3, 4), r"shape \(3, 4\), not a square"),
        (torch.zeros(4), r"shape \(4,\), not a square"),
        (torch.zeros(2, 2, dtype=torch.int64), "names torch.LongStorage"),
        ({"W": torch.eye(2)}, "holds dict"),
    ):
        path = tmp_path / "m.pth"
        torch.save(value, path)
        with pytest.raises(AlignmentError, match=why):
            read_alignment(path)
    torch.save(torch.arange(16.0).reshape(4, 4)[1:3, 1:3].t(), path)  # a transposed view into a larger storage
    expected = numpy.arange(16.0, dtype=numpy.float32).reshape(4, 4)[1:3, 1:3].T
    assert numpy.array_equal(read_alignment(path)[0], expected)


def test_a_cut_or_damaged_file_is_refused_naming_it(tmp_path):
    data = (ALIGNMENT / "tensor_legacy.pth").read_bytes()
    for size in (10, len(data) // 2, len(data) - 4):
        path = tmp_path / f"cut{size}.pth"
        path.write_bytes(data[:size])
        with pytest.raises(ModelFileError, match=rf"cut{size}\.pth: "):
            read_alignment(path)
    path = tmp_path / "zipcut.pth"
    path.write_bytes((ALIGNMENT / "tensor_zip.pth").read_bytes()[:-40])
    with pytest.raises(AlignmentError, match=r"zipcut\.pth: "):
        read_alignment(path)
    with pytest.raises(AlignmentError, match=r"missing\.pth: cannot be read"):
        read_alignment(tmp_path / "missing.pth")


def test_align_layers_is_x_times_the_transpose_on_every_layer():
    rng = numpy.random.default_rng(0)
    layers = rng.standard_normal((3, 5, 8)).astype(numpy.float32)
    aligned = align_layers(layers, EXPECTED)
    expected = numpy.einsum("ltj,ij->lti", layers.astype(numpy.float64), EXPECTED.astype(numpy.float64))
    assert aligned.dtype == numpy.float32 and aligned.shape == layers.shape
    numpy.testing.assert_allclose(aligned, expected, rtol=1e-5, atol=1e-5)
    for k in range(3):  # each layer alike, each token a row: x @ M.T
        numpy.testing.assert_allclose(aligned[k, 2], EXPECTED @ layers[k, 2], rtol=1e-5, atol=1e-5)
    weights = numpy.array([0.2, 0.5, 0.3], dtype=numpy.float32)  # aligning the mix = mixing the aligned layers
    numpy.testing.assert_allclose(
        align_layers(numpy.tensordot(weights, layers, 1), EXPECTED), numpy.tensordot(weights, aligned, 1), atol=1e-5
    )
    assert numpy.array_equal(align_layers(layers, numpy.eye(8)), layers)
    float64 = align_layers(layers.astype(numpy.float64), EXPECTED)  # the matrix follows the layers' type
    assert float64.dtype == numpy.float64


def test_align_layers_refuses_a_matrix_of_another_size():
    with pytest.raises(ValueError, match="the layers have 8 dimensions, the alignment matrix 4"):
        align_layers(numpy.zeros((3, 2, 8), dtype=numpy.float32), numpy.eye(4))
    with pytest.raises(ValueError, match=r"square; this one has shape \(2, 3\)"):
        align_layers(numpy.zeros((3, 2, 3)), numpy.zeros((2, 3)))
