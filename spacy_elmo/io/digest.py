"""SHA-256 digests of files, and the digest a user pins a model to.

bilm-tf's HDF5 format carries no checksum, so the digest of the file is the only way to tell a damaged
or replaced weight file from the one a user validated; the native format records its own (`native.py`).
Files are read in blocks, so a multi-gigabyte corpus or weight file is hashed in constant memory.
"""

import hashlib
import re
from pathlib import Path
from typing import Optional, Union

PathLike = Union[str, Path]
_BLOCK = 1 << 20
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def file_sha256(path: PathLike) -> str:
    """The SHA-256 of a file's bytes, as `sha256sum` prints it."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def combined_sha256(parts: dict[str, Optional[str]]) -> str:
    """One digest over several named digests (e.g. a weight file's and its options file's)."""
    digest = hashlib.sha256()
    for name in sorted(parts):
        digest.update(f"{name}:{parts[name] or '-'}\n".encode())
    return digest.hexdigest()


def parse_pin(pin: Optional[str], option: str) -> Optional[str]:
    """A pinned digest as given by the user (64 hex digits, any case), normalized; None when not pinned."""
    if pin is None or pin == "":
        return None
    normalized = pin.strip().lower() if isinstance(pin, str) else ""
    if not _HEX64.match(normalized):
        raise ValueError(f"{option} must be a SHA-256 digest (64 hexadecimal digits), got {pin!r}")
    return normalized


def check_pin(actual: str, pin: Optional[str], what: str, option: str) -> None:
    """Refuse a model whose digest is not the pinned one, naming both."""
    expected = parse_pin(pin, option)
    if expected is not None and actual != expected:
        raise ValueError(
            f"{what}: SHA-256 {actual} differs from the digest pinned by {option} ({expected}); the file was "
            "changed, damaged or replaced since it was pinned (`spacy elmo verify` prints a model's digest)"
        )
