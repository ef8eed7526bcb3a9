"""Tar archives (`.tar.gz`, `.tgz`, `.tar`, a TF-Hub module's compressed download) unpacked once into the
cache, so that a model published as a tarball loads as the folder it holds.

A tarball is unpacked only once it is whole and verified, into `unpacked/<SHA-256 of the tarball>/` under the
cache folder: keyed by content, so the same bytes from a URL or from a local path share one folder. It is
written into a temporary sibling renamed into place, so a folder under its final name is always complete.
The SHA-256 of every file unpacked is recorded beside the folder (`<digest>.files.json`) and checked at every
reuse: a folder changed since is said on stderr and unpacked again (the cache holds verified bytes only; copy
the folder elsewhere to edit a model).

Each member is vetted before anything is written, beyond what tarfile's "data" extraction filter refuses: no
absolute name, no `..`, no link whose target leaves the folder, no member reached through a link, no device,
FIFO or repeated name; at most `MAX_MEMBERS` members and `MAX_TOTAL_BYTES` of content. A damaged or cut
tarball is refused as a `TarballError` naming the file. The same walk checks a freshly downloaded tarball
before it is kept (`tar_problem`).
"""

import bz2
import gzip
import json
import lzma
import posixpath
import shutil
import sys
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO, Any, Callable, Optional

from ..disk import (
    atomic_directory,
    atomic_write_text,
    exclusive_lock,
    file_sha256,
    fsync_path,
    remove_stale_temporaries,
)
from ..errors import ModelFileError, first_line

TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
UNPACKED_FOLDER = "unpacked"  # under the cache folder: unpacked/<SHA-256 of the tarball>/
MAX_MEMBERS = 10_000  # a bilm-tf model or a TF-Hub module has a handful
MAX_TOTAL_BYTES = 32 << 30  # what the members may hold together (a published ELMo model is a few GB at most)
BLOCK_BYTES = 1 << 20
FILES_SUFFIX = ".files.json"  # beside unpacked/<digest>/: the SHA-256 of each file unpacked, checked at reuse
# a compressed stream's first bytes, and what reads it (each takes a file object)
DECOMPRESSORS: dict[bytes, Callable[..., Any]] = {
    b"\x1f\x8b": gzip.open,
    b"BZh": bz2.open,
    b"\xfd7zXZ\x00": lzma.open,
}
USTAR_MAGIC_AT = 257  # "ustar" in a tar header
# what a damaged or cut stream raises (a bad gzip header or CRC is a BadGzipFile, an OSError)
DAMAGE_ERRORS = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)


class TarballError(ModelFileError):
    """A tarball that cannot be unpacked safely and whole; the message names the file."""


def is_tarball_name(name: str) -> bool:
    """Whether a file or URL path is named as a tar archive."""
    return name.lower().endswith(TAR_SUFFIXES)


def looks_like_tarball(head: bytes) -> bool:
    """Whether a file's first bytes (at least 262) are those of a compressed stream or of a tar header."""
    return head.startswith(tuple(DECOMPRESSORS)) or head[USTAR_MAGIC_AT:].startswith(b"ustar")


def tar_problem(path: Path) -> Optional[str]:
    """What keeps `path` from being a whole, safe tarball, as a phrase; None if it is (the walk reads every
    member's bytes on its way, and the stream to its end)."""
    try:
        for _ in _walk(path):
            pass
    except TarballError as err:
        return str(err).removeprefix(f"{path}: ").removeprefix("a tar archive ")
    except (*DAMAGE_ERRORS, OSError) as err:
        return f"cut short or damaged: {first_line(err)}"
    return None


def unpacked(tarball: Path, cache: Path, digest: Optional[str] = None) -> Path:
    """The model folder `tarball` holds, unpacked into `cache` once (`digest`: its SHA-256, if known)."""
    digest = (digest or file_sha256(tarball)).lower()
    root = cache / UNPACKED_FOLDER
    target = root / digest
    try:
        if _changed(target) is not None:
            root.mkdir(parents=True, exist_ok=True)
            with exclusive_lock(root / f".{digest}.lock"):  # another process unpacking it: wait, reuse its folder
                changed = _changed(target)
                if changed is not None:
                    if target.is_dir():
                        print(f"{changed}; unpacking {tarball} again", file=sys.stderr)
                        shutil.rmtree(target)
                    _unpack(tarball, target)
    except OSError as err:  # a cache that cannot be written or read (permissions, a file where a folder is)
        if isinstance(err, FileNotFoundError) and not tarball.exists():
            raise
        raise TarballError(f"{tarball}: cannot unpack it into {root} ({first_line(err)})") from None
    return model_folder(target)


def intact(cache: Path, digest: Optional[str]) -> Optional[Path]:
    """The model folder unpacked from the tarball of `digest` if it is there as it was unpacked (its files'
    record checked), else None: reusing it needs neither the tarball read nor hashed again."""
    if not digest:
        return None
    target = cache / UNPACKED_FOLDER / digest.lower()
    try:
        return model_folder(target) if _changed(target) is None else None
    except OSError:  # unreadable: `unpacked` says so, naming the tarball
        return None


def _files(folder: Path) -> dict[str, str]:
    """{path in `folder`: its SHA-256} of every file (a link: "link:" and its target)."""
    listed = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink():
            listed[name] = f"link:{path.readlink()}"
        elif path.is_file():
            listed[name] = file_sha256(path)
    return listed


def _changed(target: Path) -> Optional[str]:
    """None if `target` holds exactly the files its record lists, as unpacked; else what differs."""
    if not target.is_dir():
        return f"{target} is not unpacked"
    record = target.with_name(target.name + FILES_SUFFIX)
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{target}: its record of the files unpacked ({record.name}) is missing or unreadable"
    found = _files(target)
    differ = sorted(name for name in set(recorded) | set(found) if recorded.get(name) != found.get(name))
    return f"{target}: {', '.join(differ[:3])} changed since it was unpacked" if differ else None


def model_folder(folder: Path) -> Path:
    """`folder`, or the one folder inside it while it holds nothing else (a tarball of `name/...`)."""
    while True:
        entries = list(folder.iterdir())
        if len(entries) != 1 or not entries[0].is_dir() or entries[0].is_symlink():
            return folder
        folder = entries[0]


def _unpack(tarball: Path, target: Path) -> None:
    """Unpack into a temporary sibling renamed to `target` when whole (`disk.atomic_directory`), its files'
    record written first; the temporaries of killed runs are removed before."""
    remove_stale_temporaries(target)
    try:
        with atomic_directory(target) as temporary:
            for tar, member in _walk(tarball):
                if HAS_DATA_FILTER:
                    tar.extract(member, temporary, set_attrs=False, filter="data")
                else:  # a Python before the filter's backport: the vetting here stands alone
                    tar.extract(member, temporary, set_attrs=False)
            for path in sorted(temporary.rglob("*"), reverse=True):
                if not path.is_symlink():
                    fsync_path(path)
            atomic_write_text(target.with_name(target.name + FILES_SUFFIX), json.dumps(_files(temporary), indent=0))
    except DAMAGE_ERRORS as err:
        raise TarballError(f"{tarball}: a tar archive cut short or damaged: {first_line(err)}") from None


# tarfile's "data" filter (Python 3.12, and the 3.10.12 / 3.11.4 backports) on top of the vetting here
HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def _walk(tarball: Path) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    """Each member of `tarball` in order, vetted (see the module docstring), as the stream reaches it; then
    the stream is read to its end: a cut or corrupted compressed tail (its CRC) is refused, and so is a tar
    stream that stops before its end-of-archive block (tarfile takes a cut at a header as the end)."""
    with open(tarball, "rb") as raw:
        head = raw.read(USTAR_MAGIC_AT + 8)
        raw.seek(0)
        opener = next((open_ for magic, open_ in DECOMPRESSORS.items() if head.startswith(magic)), None)
        if not looks_like_tarball(head):
            raise TarballError(f"{tarball}: not a tar archive (neither gzip, bzip2, xz nor a tar header)")
        stream: IO[bytes] = opener(raw) if opener else raw
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                vetting = _Vetting(tarball)
                for member in tar:
                    vetting.check(member)
                    yield tar, member
                end = tar.offset  # where the header that ended the archive was read
            while stream.read(BLOCK_BYTES):  # past the end-of-archive blocks: the rest of the stream, its CRC
                pass
            length = stream.tell()  # of the tar stream (decompressed), read to its end
        except DAMAGE_ERRORS as err:
            raise TarballError(f"{tarball}: a tar archive cut short or damaged: {first_line(err)}") from None
        finally:
            stream.close()
        if length < end + tarfile.BLOCKSIZE:
            raise TarballError(
                f"{tarball}: a tar archive cut short or damaged: its tar stream stops at byte {length}, "
                "before the end-of-archive block"
            )


class _Vetting:
    """The checks of each member against those before it: names, links, kinds, count and total size."""

    def __init__(self, tarball: Path) -> None:
        self.tarball = tarball
        self.count = 0
        self.total = 0
        self.names: dict[str, bool] = {}  # normalised name -> is a folder
        self.links: set[str] = set()

    def refuse(self, member: tarfile.TarInfo, why: str) -> TarballError:
        return TarballError(f"{self.tarball}: member {member.name!r} {why}; the tarball was not unpacked")

    def check(self, member: tarfile.TarInfo) -> None:
        self.count += 1
        if self.count > MAX_MEMBERS:
            raise TarballError(f"{self.tarball}: more than {MAX_MEMBERS} members (a model has a handful)")
        name = self._name(member, member.name, "name")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise self.refuse(member, "is a device, FIFO or other special file")
        parents = [posixpath.join(*name.split("/")[: i + 1]) for i in range(name.count("/"))]
        if any(parent in self.links for parent in parents):
            raise self.refuse(member, "lies behind a link in the archive")
        if name in self.names and not (member.isdir() and self.names[name]):
            raise self.refuse(member, "comes twice")
        if member.issym() or member.islnk():
            base = posixpath.dirname(name) if member.issym() else ""
            target = self._name(member, posixpath.join(base, member.linkname), "link target", member.linkname)
            if not target:
                raise self.refuse(member, "links to the archive's root")
            self.links.add(name)
        self.names[name] = member.isdir()
        if member.isfile():
            self.total += member.size
            if self.total > MAX_TOTAL_BYTES:
                raise TarballError(
                    f"{self.tarball}: its members hold more than {MAX_TOTAL_BYTES >> 30} GiB (a damaged archive "
                    "or an archive bomb)"
                )

    def _name(self, member: tarfile.TarInfo, path: str, what: str, shown: Optional[str] = None) -> str:
        """`path` normalised ("" for the root); absolute, or out of the folder, is refused (a member's own
        name may hold no `..` at all; a link's target may, while it stays inside)."""
        shown = path if shown is None else shown
        if PurePosixPath(shown).is_absolute() or PureWindowsPath(shown).is_absolute() or PureWindowsPath(shown).drive:
            raise self.refuse(member, f"has an absolute {what} ({shown!r})")
        posix = path.replace("\\", "/")
        normal = posixpath.normpath(posix)
        if normal == ".." or normal.startswith("../"):
            raise self.refuse(member, f"has a {what} outside the folder ({shown!r})")
        if what == "name" and ".." in posix.split("/"):
            raise self.refuse(member, f"has '..' in its name ({shown!r})")
        return "" if normal == "." else normal
