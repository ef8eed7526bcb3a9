"""Files on disk, below every module that reads or writes them (io, hub, embed, pretrain): the durable write,
the file digest, and the file names the formats and the hub share.

A durable write never shows a reader, or a re-run after a crash, half a file: it goes to a sibling
`<name>.tmp<pid>` (the pid tells a dead writer's leftover), is fsynced, renamed over the target, and the
directory fsynced. On an error the target is left as it was.
"""

import contextlib
import fnmatch
import glob
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional, Union

PathLike = Union[str, Path]
OPTIONS_FILE = "options.json"  # bilm-tf's, the native format's and an NLPL archive's options
WEIGHT_SUFFIXES = (".hdf5", ".h5")  # a bilm-tf weight file
TEMPORARY_SUFFIX = re.compile(r"\.tmp(\d+)$")
HASH_BLOCK_BYTES = 1 << 20


def file_hash(path: PathLike) -> Any:
    """The SHA-256 hash object of a file's bytes, streamed (a download resumed goes on from it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(HASH_BLOCK_BYTES), b""):
            digest.update(block)
    return digest


def file_sha256(path: PathLike) -> str:
    """The SHA-256 of a file's bytes, as `sha256sum` prints it."""
    return str(file_hash(path).hexdigest())


def temporary_sibling(path: Path) -> Path:
    """Where `path` is written before it is renamed into place."""
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


def _alive(pid: int) -> bool:
    try:
        if pid != os.getpid():
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    return True


def remove_stale_temporaries(path: PathLike, pattern: Optional[str] = None, keep_own: bool = True) -> list[Path]:
    """Remove, and return, the temporaries of dead writers: of the target `path`, or with `pattern` (a glob) of
    each matching target in the directory `path`. This process's own are kept unless `keep_own` is False (a
    caller writing none knows they are an earlier process's: containers reuse pids)."""
    directory = Path(path) if pattern is not None else Path(path).parent
    pattern = pattern if pattern is not None else glob.escape(Path(path).name)
    removed: list[Path] = []
    for sibling in directory.glob(f"{pattern}.tmp*"):
        match = TEMPORARY_SUFFIX.search(sibling.name)
        if match is None or not fnmatch.fnmatchcase(sibling.name[: match.start()], pattern):
            continue
        pid = int(match.group(1))
        if _alive(pid) and (keep_own or pid != os.getpid()):
            continue
        if sibling.is_dir():
            shutil.rmtree(sibling, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                sibling.unlink()
        removed.append(sibling)
    return removed


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory's entry list: what makes a rename durable)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if path.is_dir() else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError:  # e.g. directories cannot be opened on some platforms; nothing more can be done there
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """A temporary path to write `path`'s content to (by any writer), renamed over `path` if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(target)
    try:
        yield tmp
        fsync_path(tmp)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_path(target.parent)


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_directory(path: PathLike) -> Iterator[Path]:
    """A temporary directory to fill, renamed to `path` if the block succeeds; if another process made `path`
    first (two ranks building one cache entry: the same content), theirs is kept."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(target)
    shutil.rmtree(tmp, ignore_errors=True)  # left by a dead process that had this pid
    tmp.mkdir()
    try:
        yield tmp
        for child in tmp.iterdir():
            fsync_path(child)
        try:
            tmp.rename(target)
        except OSError:
            if not target.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_path(target.parent)


@contextlib.contextmanager
def exclusive_lock(lock_file: Path) -> Iterator[None]:
    """An exclusive flock on `lock_file`, never removed (others may be waiting on it); none on Windows."""
    try:
        import fcntl
    except ImportError:  # the rename into place still never shows a partial folder
        yield
        return
    with open(lock_file, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths are one file as the filesystem sees it (False where either is not there)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
