"""The alignment matrices of Schuster et al. (2019)'s aligned multilingual ELMo (`<lang>_best_mapping.pth`,
the catalog's "alignment" role), read without unpickling anything, and applied as AllenNLP applies them.

A `.pth` file is what `torch.save` writes, in either of its layouts: the zip one (`<name>/data.pkl`, the
storages as `<name>/data/<key>`, `<name>/byteorder`) or the legacy one (five pickles back to back: a magic
number, the protocol, the system's byte sizes, the object, its storages' keys; then each storage as an int64
element count and its little-endian bytes). The published matrices are legacy files holding a numpy array
(MUSE's `torch.save(W, path)` of `mapping.weight.data.cpu().numpy()`, Python 3's protocol 2), so both a torch
tensor and a numpy array are taken. The pickles are read by an unpickler that imports nothing: the few
globals such files name are inert stand-ins that only record their arguments; any other global (`os.system`,
`builtins.eval`...) is refused, naming the file. Only a float matrix of shape [d, d] is accepted; it is
returned as stored (bit for bit), as a native-order numpy array.

AllenNLP 0.9 (`modules/token_embedders/elmo_token_embedder_multilang.py`) loads the matrix M as
`torch.FloatTensor(torch.load(path))` (float32) into a bias-free `torch.nn.Linear(d, d)`'s weight and applies
it to the output of the scalar mix (after the boundary tokens are removed, before any projection), so each
token vector x becomes `x @ M.T`. The mix is linear, so that equals mixing the aligned layers:
`align_layers` applies it to every layer alike. The published matrices were fitted on the first LSTM layer's
output (AllenNLP's configuration mixes that layer only: `scalar_mix_parameters` [-9e10, 1, -9e10]).
"""

import hashlib
import io
import math
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional

import numpy

from ..disk import PathLike
from ..errors import ModelFileError, SettingError

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER
LEGACY_PROTOCOL = 1001
MAX_FILE_BYTES = 256 << 20  # a 1024 x 1024 float64 matrix is 8 MiB
# torch's storage types, by the name a pickle gives them, and the numpy dtype of their elements
STORAGE_DTYPES = {
    "HalfStorage": "<f2",
    "FloatStorage": "<f4",
    "DoubleStorage": "<f8",
    "BFloat16Storage": "<u2",  # widened to float32 (exactly) once read
}
NUMPY_FLOATS = {"f2", "f4", "f8"}


class AlignmentError(ModelFileError):
    """An alignment file that is not a float [d, d] matrix saved by torch.save; the message names the file."""


def read_alignment(file: PathLike) -> tuple[numpy.ndarray, str]:
    """The matrix in a `.pth` alignment file, as stored (float16, float32 or float64; bfloat16 as float32), and
    the SHA-256 of the very bytes it was read from."""
    path = Path(file)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise AlignmentError(f"{path}: {size} bytes, more than an alignment matrix needs ({MAX_FILE_BYTES})")
        data = path.read_bytes()
    except OSError as err:
        raise AlignmentError(f"{path}: cannot be read ({err})") from None
    try:
        value = _read_zip(path, data) if zipfile.is_zipfile(io.BytesIO(data)) else _read_legacy(path, data)
    except AlignmentError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever a damaged pickle or archive raises, named with the file
        raise AlignmentError(f"{path}: not a matrix saved by torch.save ({type(err).__name__}: {err})") from None
    return _matrix(path, value), hashlib.sha256(data).hexdigest()


AUTO = "auto"  # the setting that takes the matrix the catalog put beside an aligned model


def alignment_file(setting: str, model: str) -> Path:
    """The file an `alignment` setting names: a path, or "auto": the one .pth file beside `model` (in its
    folder, or beside its file: where the catalog put the model and its "alignment" file)."""
    if setting != AUTO:
        return Path(setting)
    from .resolve import model_location

    found = model_location(model)  # "" is the shipped model, a name its copy in the cache
    folder = found if found.is_dir() else found.parent
    matrices = sorted(folder.glob("*.pth"))
    if len(matrices) != 1:
        raise SettingError(
            f'"auto" takes the one .pth file beside the model, and {folder} holds {len(matrices)}: give the '
            "alignment file's path (the catalog's aligned models, allennlp/multilingual-*, come with theirs)",
            "alignment",
        )
    return matrices[0]


def load_alignment(setting: str, model: str, width: int) -> tuple[numpy.ndarray, str]:
    """The matrix the setting names (`model`: the model's path or name, for "auto"), as float32
    (AllenNLP's FloatTensor), checked against the model's `width`, and the SHA-256 of the bytes read (what an
    output is bound to)."""
    path = alignment_file(setting, model)
    matrix, sha256 = read_alignment(path)
    if matrix.shape != (width, width):
        raise AlignmentError(f"{path}: a {matrix.shape[0]}-wide matrix, and the model's vectors are {width} wide")
    return matrix.astype(numpy.float32), sha256


def align_layers(layers: Any, matrix: Any) -> numpy.ndarray:
    """`layers` ([..., d]: each layer's token vectors) aligned as AllenNLP aligns its mix: x -> x @ M.T, the
    matrix cast to the layers' float type first (AllenNLP's FloatTensor: float32 for float32 layers)."""
    layers = numpy.asarray(layers)
    matrix = numpy.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"an alignment matrix is square; this one has shape {matrix.shape}")
    if layers.shape[-1:] != matrix.shape[:1]:
        raise ValueError(
            f"the layers have {layers.shape[-1] if layers.ndim else 0} dimensions, the alignment matrix "
            f"{matrix.shape[0]}: is it the matrix of this model?"
        )
    dtype = layers.dtype if numpy.issubdtype(layers.dtype, numpy.floating) else numpy.dtype(numpy.float32)
    return numpy.matmul(layers.astype(dtype, copy=False), matrix.astype(dtype, copy=False).T)


# --- what the pickles may name: inert stand-ins that record their arguments


@dataclass
class _StorageType:
    name: str


@dataclass
class _Storage:
    key: str
    dtype: str
    numel: int


@dataclass
class _Tensor:
    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


@dataclass
class _Dtype:
    code: str
    order: str = "="

    def __setstate__(self, state: Any) -> None:  # (3, '<', None, None, None, -1, -1, 0)
        if not isinstance(state, tuple) or len(state) < 2 or state[1] not in ("<", ">", "|", "="):
            raise ValueError(f"an unexpected numpy dtype state {state!r}")
        self.order = state[1]


@dataclass
class _Array:
    shape: tuple[int, ...] = ()
    dtype: Optional[_Dtype] = None  # None until the pickle's BUILD gives the state
    fortran: bool = False
    data: bytes = b""

    def __setstate__(self, state: Any) -> None:  # (1, shape, dtype, is_fortran, raw bytes)
        if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[2], _Dtype)):
            raise ValueError("an unexpected numpy array state")
        if not isinstance(state[4], bytes):
            raise ValueError("a numpy array of objects, not of numbers")
        self.shape, self.dtype, self.fortran, self.data = tuple(state[1]), state[2], bool(state[3]), state[4]


_NDARRAY = object()  # what `numpy.ndarray` stands for, only passed to _reconstruct (a BUILD on it fails)


def _reconstruct(cls: object, shape: Any, code: Any) -> _Array:
    if cls is not _NDARRAY:
        raise ValueError("numpy's _reconstruct of something other than an ndarray")
    return _Array()


def _dtype(code: Any, align: Any = False, copy: Any = True) -> _Dtype:
    if code not in NUMPY_FLOATS:
        raise ValueError(f"a numpy array of {code!r}, not of floats")
    return _Dtype(code)


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise ValueError("_codecs.encode other than of a string to latin1 (protocol 2's bytes)")
    return text.encode("latin1")


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _Tensor:
    hooks = rest[1] if len(rest) > 1 else None
    if not isinstance(storage, _Storage) or (hooks is not None and hooks != {}):
        raise ValueError("a tensor that is not a plain tensor of a float storage")
    return _Tensor(storage, int(offset), tuple(int(s) for s in size), tuple(int(s) for s in stride))


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    return data


class _StandIn:
    """A global's stand-in, made afresh for each mention: a pickle's BUILD on it changes nothing shared."""

    __slots__ = ("function",)

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)


_FUNCTIONS: dict[tuple[str, str], Callable[..., Any]] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("collections", "OrderedDict"): dict,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _encode,
}


class _Unpickler(pickle.Unpickler):
    """Imports nothing: a global is a fresh stand-in or refused, naming the file."""

    def __init__(self, path: Path, stream: io.BytesIO, storages: bool = False) -> None:
        super().__init__(stream)
        self.path, self.storages = path, storages

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _FUNCTIONS:
            return _StandIn(_FUNCTIONS[module, name])
        if (module, name) == ("numpy", "ndarray"):
            return _NDARRAY
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        raise AlignmentError(
            f"{self.path}: names {module}.{name}, which an alignment matrix never does (only a float tensor "
            "or array is read; nothing was run)"
        )

    def persistent_load(self, pid: Any) -> Any:
        if not self.storages or not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise ValueError(f"an unexpected persistent id {pid!r}")
        return _storage(pid)


def _storage(pid: tuple[Any, ...]) -> _Storage:
    """A storage's record from its persistent id: ('storage', type, key, location, numel[, view])."""
    if len(pid) not in (5, 6) or not isinstance(pid[1], _StorageType) or (len(pid) == 6 and pid[5] is not None):
        raise ValueError(f"an unexpected storage {pid[:5]!r} (not a float storage, or a view of one)")
    return _Storage(str(pid[2]), STORAGE_DTYPES[pid[1].name], int(pid[4]))


def _read_zip(path: Path, data: bytes) -> Any:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
        pickles = [name for name in names if name.endswith("/data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise AlignmentError(f"{path}: a zip archive, but not one torch.save wrote (no single <name>/data.pkl)")
        prefix = pickles[0][: -len("data.pkl")]
        stated = prefix + "byteorder" in names  # older torch versions write none: little-endian
        order = archive.read(prefix + "byteorder").decode("ascii").strip() if stated else "little"
        if order not in ("little", "big"):
            raise AlignmentError(f"{path}: byteorder {order!r}")
        value = _Unpickler(path, io.BytesIO(archive.read(pickles[0])), storages=True).load()

        def raw(storage: _Storage) -> bytes:
            return archive.read(f"{prefix}data/{storage.key}")

        return _with_data(path, value, raw, "<" if order == "little" else ">")


def _read_legacy(path: Path, data: bytes) -> Any:
    stream = io.BytesIO(data)
    if _Unpickler(path, stream).load() != LEGACY_MAGIC:
        raise AlignmentError(f"{path}: neither a zip archive nor a legacy torch.save file (no magic number)")
    if _Unpickler(path, stream).load() != LEGACY_PROTOCOL:
        raise AlignmentError(f"{path}: a legacy torch.save file of an unknown protocol")
    _Unpickler(path, stream).load()  # the system's byte order and sizes: storages are little-endian whatever it says
    value = _Unpickler(path, stream, storages=True).load()
    keys = _Unpickler(path, stream).load()
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise AlignmentError(f"{path}: its storage keys are not a list of names")
    records = {value.storage.key: value.storage} if isinstance(value, _Tensor) else {}
    blobs: dict[str, bytes] = {}
    for key in keys:
        numel = int.from_bytes(_take(path, stream, 8), "little", signed=True)
        storage = records.get(key)
        if storage is None or numel != storage.numel:
            raise AlignmentError(f"{path}: storage {key!r} is not the one its tensor names ({numel} elements)")
        blobs[key] = _take(path, stream, numel * numpy.dtype(storage.dtype).itemsize)
    if stream.read(1):
        raise AlignmentError(f"{path}: bytes follow its last storage, where nothing should")
    return _with_data(path, value, lambda storage: blobs[storage.key], "<")


def _take(path: Path, stream: io.BytesIO, n: int) -> bytes:
    chunk = stream.read(n)
    if len(chunk) != n:
        raise AlignmentError(f"{path}: ends inside a storage (cut short?)")
    return chunk


def _with_data(path: Path, value: Any, raw: Callable[[_Storage], bytes], order: Literal["<", ">"]) -> Any:
    """The object with a tensor's elements read from its storage (an array of the stored dtype)."""
    if not isinstance(value, _Tensor):
        return value
    storage = value.storage
    dtype = numpy.dtype(storage.dtype).newbyteorder(order)
    blob = raw(storage)
    if len(blob) != storage.numel * dtype.itemsize:
        raise AlignmentError(f"{path}: storage {storage.key!r} holds {len(blob)} bytes, not {storage.numel} elements")
    flat = numpy.frombuffer(blob, dtype=dtype)
    if any(s < 0 for s in value.size) or any(s < 0 for s in value.stride) or len(value.size) != len(value.stride):
        raise AlignmentError(f"{path}: a tensor of size {value.size} and stride {value.stride}")
    last = value.offset + sum((n - 1) * s for n, s in zip(value.size, value.stride)) if all(value.size) else -1
    if value.offset < 0 or last >= storage.numel:
        raise AlignmentError(f"{path}: a tensor reaching past its storage's {storage.numel} elements")
    array = numpy.lib.stride_tricks.as_strided(
        flat[value.offset :], shape=value.size, strides=tuple(s * dtype.itemsize for s in value.stride)
    )
    if storage.dtype == STORAGE_DTYPES["BFloat16Storage"]:
        return (array.astype(numpy.uint32) << 16).view(numpy.float32)
    return array.astype(dtype.newbyteorder("="))


def _matrix(path: Path, value: Any) -> numpy.ndarray:
    """The float [d, d] matrix `value` holds; anything else is refused, naming the file."""
    if isinstance(value, _Array):
        if value.dtype is None:
            raise AlignmentError(f"{path}: a numpy array whose state is missing")
        dtype = numpy.dtype(value.dtype.code).newbyteorder(">" if value.dtype.order == ">" else "<")
        if len(value.data) != math.prod(value.shape) * dtype.itemsize:
            raise AlignmentError(f"{path}: a numpy array of shape {value.shape} holding {len(value.data)} bytes")
        array = numpy.frombuffer(value.data, dtype=dtype).reshape(value.shape, order="F" if value.fortran else "C")
        value = array.astype(dtype.newbyteorder("="))
    if not isinstance(value, numpy.ndarray) or not numpy.issubdtype(value.dtype, numpy.floating):
        raise AlignmentError(f"{path}: holds {type(value).__name__}, not a float tensor or array")
    if value.ndim != 2 or value.shape[0] != value.shape[1] or value.shape[0] == 0:
        raise AlignmentError(f"{path}: a matrix of shape {tuple(value.shape)}, not a square [d, d] one")
    return numpy.ascontiguousarray(value)
