"""A model's files by name in a directory or a zip archive's folder: every format reads through
`ModelFiles`, so every format loads from every container, and each read is hashed as it is read.
"""

import hashlib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..disk import file_sha256
from ..errors import ModelFileError
from .archive import ArchiveError, Limit, member_blocks
from .damage import damaged_as


@dataclass(frozen=True)
class ModelFiles:
    """`root` is a directory, or a zip archive whose members under `prefix` are the files; in a directory a
    name may be a path of its own (absolute, or relative to the working directory when `root` is `Path()`)."""

    root: Path
    prefix: Optional[str] = None  # None: a directory; else the folder in the archive ("" for its root)
    digests: dict[str, str] = field(default_factory=dict, compare=False)  # name -> SHA-256 of what was read

    @property
    def zipped(self) -> bool:
        return self.prefix is not None

    def where(self, name: str) -> str:
        """How messages name a file: its path, or `archive.zip/member` (as `zipfile.Path` does)."""
        return f"{self.root}/{self.prefix}{name}" if self.prefix is not None else str(self.root / name)

    def path(self, name: str) -> Optional[Path]:
        """The file on disk, for a reader that opens it in place (h5py); None inside an archive."""
        return None if self.prefix is not None else self.root / name

    def exists(self, name: str) -> bool:
        if self.prefix is None:
            return (self.root / name).is_file()
        unreadable = damaged_as(ArchiveError, str(self.root), "not a readable zip archive")
        with unreadable, zipfile.ZipFile(self.root) as handle:
            return self.prefix + name in handle.NameToInfo

    def read(self, name: str, limit: Optional[Limit] = None) -> bytes:
        """A file's bytes (FileNotFoundError naming it when absent), its SHA-256 recorded in `digests`."""
        if self.prefix is not None:
            data = b"".join(member_blocks(self.root, self.prefix + name, limit))
        else:
            with damaged_as(ModelFileError, self.where(name), "cannot be read"):
                data = self._file(name).read_bytes()
        self.digests[name] = hashlib.sha256(data).hexdigest()
        return data

    def sha256(self, name: str, limit: Optional[Limit] = None) -> str:
        """A file's SHA-256, streamed (a weight file is never held whole to hash it)."""
        if self.prefix is None:
            with damaged_as(ModelFileError, self.where(name), "cannot be read"):
                return file_sha256(self._file(name))
        digest = hashlib.sha256()
        for block in member_blocks(self.root, self.prefix + name, limit):
            digest.update(block)
        return digest.hexdigest()

    def _file(self, name: str) -> Path:
        if not (self.root / name).is_file():
            raise FileNotFoundError(f"{self.root / name}: missing")
        return self.root / name


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def starts_as_hdf5(path: Path) -> bool:
    """Whether `path` begins with the HDF5 signature (at the start: h5py writes no user block)."""
    try:
        with open(path, "rb") as raw:
            return raw.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE
    except OSError:
        return False
