"""TensorFlow's tensor bundle (a checkpoint: `PREFIX.index` and `PREFIX.data-NNNNN-of-NNNNN`) read without
TensorFlow, so that a TF-Hub module's `variables/` loads with numpy alone.

The index is a LevelDB-style table (TensorFlow's `core/lib/io/table`): data blocks of prefix-compressed
key/value entries, an index block of their handles, and a 48-byte footer ending in a magic number; every
block is followed by a type byte (0: stored as is) and the masked CRC-32C of its bytes. Its first key, "",
holds a `BundleHeaderProto` (number of shards, endianness, version); every other key is a tensor's name and
holds a `BundleEntryProto` (dtype, shape, shard, offset, size, the masked CRC-32C of the tensor's bytes).
A tensor is read from its shard (memory-mapped: only what is read is paged in) and checked against that
CRC (`crc32c.py`), so a flipped bit is refused rather than loaded.

Refused, as a `BundleError` naming the file and the variable: a bad footer magic, a damaged block or entry
(its CRC), a compressed block (TensorFlow writes bundle indexes uncompressed; snappy is not supported), a
big-endian bundle, a newer bundle version, a truncated shard, a partitioned ("sliced") variable, a dtype
numpy cannot hold as stored (bfloat16, strings, resources, quantized types).
"""

import contextlib
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy

from ..errors import ModelFileError
from .crc32c import Buffer, masked_crc32c
from .protobuf import field_values, signed64, varint

INDEX_SUFFIX = ".index"
TABLE_MAGIC = 0xDB4775248B80FB57  # the footer's last 8 bytes (TensorFlow's kTableMagicNumber)
FOOTER_BYTES = 48  # two block handles (varints, padded to 40 bytes) and the magic
TRAILER_BYTES = 5  # after each block: its type byte and the masked CRC-32C of block + type
BLOCK_TYPES = {0: "uncompressed", 1: "snappy-compressed"}
BUNDLE_VERSION = 1  # TensorFlow's kTensorBundleVersion: what a reader of this version reads

# DataType (tensorflow/core/framework/types.proto) -> the numpy dtype of its stored bytes (little-endian)
DTYPES = {
    1: "float32",
    2: "float64",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    8: "complex64",
    9: "int64",
    10: "bool",
    17: "uint16",
    18: "complex128",
    19: "float16",
    22: "uint32",
    23: "uint64",
}
# the others, by name, for messages
UNSUPPORTED_DTYPES = {7: "string", 11: "qint8", 12: "quint8", 13: "qint32", 14: "bfloat16", 15: "qint16"}
UNSUPPORTED_DTYPES.update({16: "quint16", 20: "resource", 21: "variant", 24: "float8_e5m2", 25: "float8_e4m3fn"})

# BundleHeaderProto and BundleEntryProto (tensorflow/core/protobuf/tensor_bundle.proto): field numbers
_NUM_SHARDS, _ENDIANNESS, _VERSION = 1, 2, 3
_MIN_CONSUMER = 2  # VersionDef.min_consumer
_DTYPE, _SHAPE, _SHARD, _OFFSET, _SIZE, _CRC32C, _SLICES = 1, 2, 3, 4, 5, 6, 7
_DIM, _UNKNOWN_RANK, _DIM_SIZE = 2, 3, 1  # TensorShapeProto.dim, .unknown_rank; Dim.size


class BundleError(ModelFileError):
    """A TensorFlow checkpoint (tensor bundle) that is damaged or stored in a way this reader does not read."""


def _handle(data: memoryview, pos: int) -> tuple[int, int, int]:
    """(offset, size, position after) of a BlockHandle."""
    offset, pos = varint(data, pos)
    size, pos = varint(data, pos)
    return offset, size, pos


def _block(table: memoryview, offset: int, size: int, source: str) -> memoryview:
    """A block's contents, its trailer's CRC and type checked."""
    end = offset + size + TRAILER_BYTES
    if end > len(table) - FOOTER_BYTES:
        raise BundleError(f"{source}: a block runs past the end of the index ({end} > {len(table)} bytes): damaged")
    contents, kind = table[offset : offset + size], table[offset + size]
    stored = int.from_bytes(table[offset + size + 1 : end], "little")
    if masked_crc32c(bytes(table[offset : offset + size + 1])) != stored:
        raise BundleError(f"{source}: the index block at byte {offset} fails its CRC-32C: the index is damaged")
    if kind != 0:
        what = BLOCK_TYPES.get(kind, f"of unknown type {kind}")
        raise BundleError(
            f"{source}: the index block at byte {offset} is {what}; only uncompressed blocks (what TensorFlow "
            "writes for a checkpoint) are supported"
        )
    return contents


def _block_entries(block: memoryview, source: str) -> Iterator[tuple[bytes, memoryview]]:
    """A block's (key, value) entries: each key shares a prefix with the one before (LevelDB's block format)."""
    if len(block) < 4:
        raise BundleError(f"{source}: an index block of {len(block)} bytes: damaged")
    n_restarts = int.from_bytes(block[-4:], "little")
    end = len(block) - 4 * (n_restarts + 1)
    if end < 0:
        raise BundleError(f"{source}: an index block claims {n_restarts} restart points: damaged")
    pos, key = 0, b""
    try:
        while pos < end:
            shared, pos = varint(block, pos)
            unshared, pos = varint(block, pos)
            value_size, pos = varint(block, pos)
            if shared > len(key) or pos + unshared + value_size > end:
                raise ValueError("an entry runs past its block")
            key = key[:shared] + bytes(block[pos : pos + unshared])
            pos += unshared
            yield key, block[pos : pos + value_size]
            pos += value_size
    except ValueError as err:
        raise BundleError(f"{source}: an index block is damaged ({err})") from None


def table_entries(table: memoryview, source: str) -> Iterator[tuple[bytes, memoryview]]:
    """Every (key, value) of a LevelDB-style table (a checkpoint's index), in key order."""
    if len(table) < FOOTER_BYTES:
        raise BundleError(f"{source}: {len(table)} bytes, shorter than a table's footer: truncated or not an index")
    footer = table[len(table) - FOOTER_BYTES :]
    magic = int.from_bytes(footer[-8:-4], "little") | int.from_bytes(footer[-4:], "little") << 32
    if magic != TABLE_MAGIC:
        raise BundleError(
            f"{source}: the footer's magic number is {magic:#018x}, not a TensorFlow table's ({TABLE_MAGIC:#018x}): "
            "truncated, damaged, or not a checkpoint index"
        )
    try:
        _, _, pos = _handle(footer, 0)  # the metaindex, which a checkpoint leaves empty
        index_offset, index_size, _ = _handle(footer, pos)
    except ValueError as err:
        raise BundleError(f"{source}: the footer is damaged ({err})") from None
    for _, handle in _block_entries(_block(table, index_offset, index_size, source), source):
        try:
            offset, size, _ = _handle(handle, 0)
        except ValueError as err:
            raise BundleError(f"{source}: the index block is damaged ({err})") from None
        yield from _block_entries(_block(table, offset, size, source), source)


# --- the bundle ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleEntry:
    """One tensor of a bundle as its index describes it; `crc32c` is the masked CRC-32C stored (None if none)."""

    name: str
    dtype_code: int
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: Optional[int]
    n_slices: int = 0

    @property
    def dtype(self) -> str:
        """numpy's name of the stored dtype, or TensorFlow's for one numpy does not hold."""
        code = self.dtype_code
        return DTYPES.get(code) or UNSUPPORTED_DTYPES.get(code, f"unknown (DataType {code})")


def _shape(message: memoryview) -> tuple[int, ...]:
    dims: list[int] = []
    for number, value in field_values(message):
        if number == _UNKNOWN_RANK and value:
            raise ValueError("a shape of unknown rank")
        if number == _DIM and isinstance(value, memoryview):
            sizes = [signed64(v) for n, v in field_values(value) if n == _DIM_SIZE and isinstance(v, int)]
            size = sizes[-1] if sizes else 0
            if size < 0:
                raise ValueError(f"dimension {len(dims)} has size {size}")
            dims.append(size)
    return tuple(dims)


def _entry(name: str, value: memoryview) -> BundleEntry:
    scalars: dict[int, int] = {}
    shape: tuple[int, ...] = ()
    n_slices = 0
    for number, field in field_values(value):
        if number == _SHAPE and isinstance(field, memoryview):
            shape = _shape(field)
        elif number == _SLICES:
            n_slices += 1
        elif isinstance(field, int):
            scalars[number] = field
    return BundleEntry(
        name,
        scalars.get(_DTYPE, 0),
        shape,
        scalars.get(_SHARD, 0),
        signed64(scalars.get(_OFFSET, 0)),
        signed64(scalars.get(_SIZE, 0)),
        scalars.get(_CRC32C),
        n_slices,
    )


def map_file(path: Path) -> Buffer:
    """A file's bytes, memory-mapped (pages are read as they are used)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (a TensorFlow checkpoint's data shard)")
    with open(path, "rb") as handle:
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else b""


class TensorBundle:
    """A checkpoint's tensors: `entries` by name (read from the index at once), `read(name)` the array. Its
    files are named from `prefix` (`PREFIX.index`, `PREFIX.data-NNNNN-of-NNNNN`); `open_file(name)` gives a
    data shard's bytes (memory-mapped by `open`), `where(name)` names a file in messages."""

    def __init__(
        self, index: Buffer, prefix: str, open_file: Callable[[str], Buffer], where: Callable[[str], str] = str
    ) -> None:
        self.prefix, self._open_file, self._where = prefix, open_file, where
        self.index_name = where(prefix + INDEX_SUFFIX)
        self._shards: dict[int, Buffer] = {}
        header: Optional[memoryview] = None
        self.entries: dict[str, BundleEntry] = {}
        for key, value in table_entries(memoryview(index), self.index_name):
            if key == b"":
                header = value
                continue
            if key.startswith(b"\x00"):  # a slice of a partitioned variable (an encoded name and extent)
                continue
            name = key.decode("utf-8", "backslashreplace")
            try:
                self.entries[name] = _entry(name, value)
            except ValueError as err:
                raise BundleError(f"{self.index_name}: the entry of variable '{name}' is damaged ({err})") from None
        if header is None:
            raise BundleError(f"{self.index_name}: no bundle header (the empty key): not a TensorFlow checkpoint index")
        self.n_shards = self._header(header)

    def _header(self, header: memoryview) -> int:
        try:
            values = dict(field_values(header))
            version = values.get(_VERSION)
            min_consumer = dict(field_values(version)).get(_MIN_CONSUMER, 0) if isinstance(version, memoryview) else 0
        except ValueError as err:
            raise BundleError(f"{self.index_name}: the bundle header is damaged ({err})") from None
        if values.get(_ENDIANNESS, 0) != 0:
            raise BundleError(
                f"{self.index_name}: the checkpoint was written on a big-endian machine; only little-endian "
                "checkpoints (what x86 and ARM write) are supported"
            )
        if isinstance(min_consumer, int) and min_consumer > BUNDLE_VERSION:
            raise BundleError(
                f"{self.index_name}: the checkpoint needs a reader of bundle version {min_consumer}; this one reads "
                f"version {BUNDLE_VERSION}"
            )
        n_shards = values.get(_NUM_SHARDS, 0)
        if not isinstance(n_shards, int) or n_shards < 1 or n_shards > 99999:
            raise BundleError(f"{self.index_name}: the bundle header gives {n_shards} data shards: damaged")
        return n_shards

    @classmethod
    def open(cls, prefix: Union[str, Path]) -> "TensorBundle":
        """The bundle at `prefix` (`PREFIX.index` and its data shards), its shards memory-mapped when read;
        `close` (or `with`) unmaps them."""
        index = Path(f"{prefix}{INDEX_SUFFIX}")
        if not index.is_file():
            raise FileNotFoundError(f"{index}: missing (a TensorFlow checkpoint's index)")
        return cls(index.read_bytes(), str(prefix), lambda name: map_file(Path(name)))

    def shard_file(self, shard: int) -> str:
        """The name of data shard `shard`, as TensorFlow writes it."""
        return f"{self.prefix}.data-{shard:05d}-of-{self.n_shards:05d}"

    def close(self) -> None:
        """Unmap the shards; one still viewed (an error's traceback can hold a view) unmaps when it is freed."""
        for data in self._shards.values():
            if isinstance(data, mmap.mmap):
                with contextlib.suppress(BufferError):
                    data.close()
        self._shards.clear()

    def __enter__(self) -> "TensorBundle":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def data(self, shard: int) -> Buffer:
        """Shard `shard`'s bytes (opened once)."""
        if shard not in self._shards:
            self._shards[shard] = self._open_file(self.shard_file(shard))
        return self._shards[shard]

    def read(self, name: str) -> numpy.ndarray:
        """Variable `name` as TensorFlow stored it (dtype and shape), its size and CRC-32C checked."""
        entry = self.entries.get(name)
        if entry is None:
            raise KeyError(f"{self.index_name}: no variable '{name}'")
        where = f"{self.index_name}: variable '{name}'"
        if entry.n_slices:
            raise BundleError(
                f"{where} is stored partitioned into {entry.n_slices} slices, which this reader does not assemble"
            )
        if entry.dtype_code not in DTYPES:
            raise BundleError(f"{where} has dtype {entry.dtype}, which this reader does not read")
        if not 0 <= entry.shard < self.n_shards:
            raise BundleError(f"{where} is in shard {entry.shard} of {self.n_shards}: the index is damaged")
        dtype = numpy.dtype(DTYPES[entry.dtype_code]).newbyteorder("<")
        expected = prod(entry.shape) * dtype.itemsize
        if entry.size != expected or entry.offset < 0:
            raise BundleError(
                f"{where} is recorded as {entry.size} bytes at byte {entry.offset}, but shape {entry.shape} of "
                f"{entry.dtype} takes {expected}: the index is damaged"
            )
        data, shard_name = self.data(entry.shard), self._where(self.shard_file(entry.shard))
        end = entry.offset + entry.size
        if end > len(data):
            raise BundleError(
                f"{shard_name}: variable '{name}' needs bytes {entry.offset} to {end}, but the file has {len(data)}: "
                "the data shard is truncated; copy or download the model again"
            )
        value, crc = _copied(data, entry, dtype)  # no view into the shard outlives the call
        if entry.crc32c is not None and crc != entry.crc32c:
            raise BundleError(
                f"{shard_name}: variable '{name}' fails its CRC-32C (recorded in "
                f"{self.index_name}): the data shard is damaged; copy or download the model again"
            )
        return value


def _copied(data: Buffer, entry: BundleEntry, dtype: numpy.dtype) -> tuple[numpy.ndarray, int]:
    """A tensor's stored bytes as an array of its own (native byte order), and their masked CRC-32C."""
    raw = memoryview(data)[entry.offset : entry.offset + entry.size]
    value = numpy.frombuffer(raw, dtype=dtype).reshape(entry.shape).astype(dtype.newbyteorder("="))
    return value, masked_crc32c(raw)
