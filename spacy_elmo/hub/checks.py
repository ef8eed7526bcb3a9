"""Whether a downloaded or cached file is the format it claims, for when no digest vouches for it.

None of the catalog's sources states a digest, and a server need not state a length, so a body cut short, a
file that changed half way or an error page served as `application/octet-stream` would otherwise be kept as
good. Each file is read whole as the format its name (or its first bytes) claims: zip members' CRC-32s (up
to `MAX_CRC_BYTES`), every object of an HDF5 file, an options JSON object, a tarball vetted as it would be
unpacked, a `.pth` file's zip archive or legacy pickles (walked opcode by opcode, never unpickled). A body
that starts like an HTML page is refused whatever the name. The loader checks the model itself later; these
check only that the bytes arrived whole.
"""

import json
import pickletools
import zipfile
from pathlib import Path
from typing import Optional

from ..errors import first_line
from .unpack import is_tarball_name, looks_like_tarball, tar_problem

ZIP, HDF5, JSON, TAR, PTH = "zip", "hdf5", "json", "tar", "pth"
FORMAT_NAMES = {
    ZIP: "a zip archive",
    HDF5: "an HDF5 file",
    JSON: "a JSON object (options)",
    TAR: "a tar archive",
    PTH: "a PyTorch file",
}
SUFFIXES = {".zip": ZIP, ".hdf5": HDF5, ".h5": HDF5, ".json": JSON, ".pth": PTH, ".pt": PTH}
LEGACY_TORCH_PICKLES = 5  # magic number, protocol, system info, the object, its storages' keys
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
ZIP_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06")  # a member first; an empty archive's end record
HTML_STARTS = (b"<!doctype", b"<html")
MAX_CRC_BYTES = 4 << 30  # beyond it (a zip bomb's claim) only the central directory is read
MAX_JSON_BYTES = 16 << 20
SNIFF_BYTES = 1024


def claimed_by_name(name: str) -> Optional[str]:
    """The format a file's name claims (a tarball's by `unpack.is_tarball_name`), if any."""
    return TAR if is_tarball_name(name) else SUFFIXES.get(Path(name).suffix.lower())


def claimed_format(path: Path) -> str:
    """The format `path` claims by its name, else by its first bytes ("" if none it could be)."""
    by_name = claimed_by_name(path.name)
    if by_name:
        return by_name
    head = _head(path)
    if head.startswith(HDF5_SIGNATURE):
        return HDF5
    if head.startswith(ZIP_SIGNATURES):
        return ZIP
    if looks_like_tarball(head):
        return TAR
    return JSON if head.lstrip().startswith(b"{") else ""


def is_html(path: Path) -> bool:
    """Whether the file starts like an HTML page (an error or login page served as a model file)."""
    head = _head(path).lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith(HTML_STARTS)


def format_problem(path: Path, kind: Optional[str] = None) -> Optional[str]:
    """What keeps `path` from reading as `kind` (default: what it claims), as a phrase; None if it reads."""
    if is_html(path):
        return "is an HTML page, not a model file (an error or login page?)"
    kind = kind or claimed_format(path)
    if not kind:
        return f"is none of {', '.join(FORMAT_NAMES.values())}"
    read = {ZIP: _zip_problem, HDF5: _hdf5_problem, JSON: _json_problem, TAR: tar_problem, PTH: _pth_problem}[kind]
    try:
        problem = read(path)
    except OSError as err:
        problem = str(err)
    return f"is not a readable {FORMAT_NAMES[kind].split(' ', 1)[1]} ({problem})" if problem else None


def _zip_problem(path: Path) -> Optional[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if sum(member.file_size for member in members) > MAX_CRC_BYTES:
                return None
            for member in members:
                try:
                    with archive.open(member) as stream:
                        while stream.read(1 << 20):
                            pass
                except (NotImplementedError, RuntimeError):  # a compression or encryption the loader names
                    continue
    except (zipfile.BadZipFile, EOFError, ValueError) as err:  # a bad CRC-32 is a BadZipFile
        return str(err) or type(err).__name__
    return None


def _hdf5_problem(path: Path) -> Optional[str]:
    import h5py

    if not _head(path).startswith(HDF5_SIGNATURE) and not h5py.is_hdf5(str(path)):  # a user block moves it
        return "no HDF5 signature"
    try:
        with h5py.File(path, "r") as handle:
            handle.visit(lambda name: None)
    except (OSError, RuntimeError, KeyError, ValueError) as err:
        return first_line(err)
    return None


def _json_problem(path: Path) -> Optional[str]:
    if path.stat().st_size > MAX_JSON_BYTES:
        return f"over {MAX_JSON_BYTES >> 20} MiB"
    try:
        value = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as err:
        return str(err)
    return None if isinstance(value, dict) else f"a JSON {type(value).__name__}, not an object"


def _pth_problem(path: Path) -> Optional[str]:
    """A zip-layout .pth as a zip archive; a legacy one as its pickles, each walked to its STOP, and, when
    no storage follows (an array pickled whole, as the published alignment matrices are), nothing after."""
    if _head(path).startswith(ZIP_SIGNATURES):
        return _zip_problem(path)
    try:
        with open(path, "rb") as handle:
            last: list[str] = []  # the opcodes of the last pickle
            for _ in range(LEGACY_TORCH_PICKLES):
                last = [op.name for op, _, _ in pickletools.genops(handle)]
            rest = path.stat().st_size - handle.tell()
    except (ValueError, EOFError) as err:  # genops: an opcode cut short, or no STOP before the end
        return f"cut short or damaged: {err}"
    no_storage = [name for name in last if name not in ("PROTO", "BINPUT", "PUT", "MEMOIZE")] == ["EMPTY_LIST", "STOP"]
    if no_storage and rest:
        return f"{rest} bytes follow its last pickle, where nothing should"
    if not no_storage and not rest:
        return "its storages are missing after the pickles (cut short?)"
    return None


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(SNIFF_BYTES)
    except OSError:
        return b""
