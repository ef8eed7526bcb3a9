"""Published models by name or URL, fetched once into a per-user cache and checked at every reuse.

`resolve_model_source` passes a local path through and turns a catalog name or an http(s) URL into a path in
the cache (`cache`, else `SPACY_ELMO_CACHE`, else the user cache folder), laid out as `host/path` of each URL
so that a copied cache works. A bilm-tf model published as two files lands in one folder (`options.json` and
the weights). Downloads go through pooch, resumed from `NAME.part`, refused for an HTML page, an HTTP error, a
short body or a wrong catalog digest; each file's SHA-256 is recorded beside it (`NAME.sha256`) and checked at
every reuse. Offline (`offline=True` or `SPACY_ELMO_OFFLINE=1`), what is missing is named, not fetched.
"""

import contextlib
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

from ..text import PathLike
from .catalog import (
    ARCHIVE_ROLE,
    CatalogEntry,
    close_names,
    entry_for_url,
    find_entry,
    load_catalog,
    looks_like_name,
    unknown_name_message,
)

if TYPE_CHECKING:
    import requests

CACHE_ENV = "SPACY_ELMO_CACHE"
OFFLINE_ENV = "SPACY_ELMO_OFFLINE"
OPTIONS_NAME = "options.json"
WEIGHT_SUFFIXES = (".hdf5", ".h5")
RETRIES = 3  # tries after the first; each resumes where the last one broke off
TIMEOUT_S = 60.0  # of one connect or read, not of the whole download
CHUNK_BYTES = 1 << 20
PARTIAL_SUFFIX = ".part"
DIGEST_SUFFIX = ".sha256"


class DownloadError(ValueError):
    """A download refused or failed: the message names the URL or the cached file."""


class _Refused(Exception):
    """What another try cannot mend (an HTTP 4xx, an HTML page, a wrong digest): pooch does not retry it."""


def is_url(spec: PathLike) -> bool:
    return str(spec).startswith(("http://", "https://"))


def is_offline(offline: Optional[bool] = None) -> bool:
    if offline is not None:
        return offline
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir(cache: Optional[PathLike] = None) -> Path:
    """The cache folder: `cache`, else `SPACY_ELMO_CACHE`, else the user cache folder (XDG on Linux)."""
    if cache:
        return Path(cache).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    import pooch  # type: ignore[import-untyped]  # (platformdirs); importing pooch imports no HTTP library

    return Path(pooch.os_cache("spacy-elmo"))


def resolve_model_source(
    spec: PathLike, cache: Optional[PathLike] = None, offline: Optional[bool] = None, progress: bool = True
) -> Path:
    """A local path for `spec` (a name or URL fetched into the cache once); a `publisher/model` name the catalog
    lacks is refused with the names close to it, anything else returned as a path for the caller to judge."""
    text = str(spec)
    if is_url(text):
        return download_url(text, cache, offline, progress)
    if Path(text).exists():
        return Path(spec)
    catalog = load_catalog()
    entry = find_entry(text, catalog)
    if entry is not None:
        return download_entry(entry, cache, offline, progress)
    if looks_like_name(text, catalog) or ("/" in text and close_names(text, catalog)):
        raise FileNotFoundError(f"{unknown_name_message(text, catalog)} (and no file or folder {text!r} exists)")
    return Path(spec)


def download_entry(
    entry: CatalogEntry, cache: Optional[PathLike] = None, offline: Optional[bool] = None, progress: bool = True
) -> Path:
    """Fetch a catalog entry (or check its cached copy): the archive, or a two-file model's folder."""
    files = local_files(entry.urls, cache)
    for role, url in entry.urls.items():
        fetch(url, files[role], entry.sha256.get(role), offline, progress)
    return files[ARCHIVE_ROLE] if ARCHIVE_ROLE in files else files["weights"].parent


def download_url(
    url: str, cache: Optional[PathLike] = None, offline: Optional[bool] = None, progress: bool = True
) -> Path:
    """Fetch the model at `url`: its catalog entry, a weights file with the options beside it, or an archive."""
    entry = entry_for_url(url)
    if entry is not None:
        return download_entry(entry, cache, offline, progress)
    if urlsplit(url).path.lower().endswith(".json"):
        raise DownloadError(f"{url} is an options file: give the URL of the model's weights (.hdf5) or archive")
    urls = {ARCHIVE_ROLE: url}
    if urlsplit(url).path.lower().endswith(WEIGHT_SUFFIXES):
        urls = {"options": options_url_for(url), "weights": url}
    return download_entry(CatalogEntry(url, "", "", "", urls, {}), cache, offline, progress)


def options_url_for(weights_url: str) -> str:
    """The options beside a weights file, by AllenNLP's naming (`X_weights.hdf5` -> `X_options.json`), or
    `options.json` beside it (bilm-tf's and the NLPL repository's naming)."""
    parts = urlsplit(weights_url)
    folder, _, name = parts.path.rpartition("/")
    stem = name.rsplit(".", 1)[0]
    options = stem[: -len("weights")] + "options.json" if stem.endswith("weights") else OPTIONS_NAME
    return parts._replace(path=f"{folder}/{options}", query="", fragment="").geturl()


def local_files(urls: dict[str, str], cache: Optional[PathLike] = None) -> dict[str, Path]:
    """Where each URL of a model lives in the cache; a two-file model's in a folder named after its weights."""
    if ARCHIVE_ROLE in urls:
        return {ARCHIVE_ROLE: _cache_path(urls[ARCHIVE_ROLE], cache)}
    weights = _cache_path(urls["weights"], cache)
    folder = weights.with_name(weights.name.rsplit(".", 1)[0])
    return {"options": folder / OPTIONS_NAME, "weights": folder / weights.name}


def is_cached(entry: CatalogEntry, cache: Optional[PathLike] = None) -> bool:
    return all(path.exists() for path in local_files(entry.urls, cache).values())


def _cache_path(url: str, cache: Optional[PathLike]) -> Path:
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s not in ("", ".", "..")] or ["index"]
    if parts.query:  # distinct queries, distinct files
        segments[-1] += "-" + hashlib.sha256(parts.query.encode()).hexdigest()[:12]
    return cache_dir(cache).joinpath(parts.netloc.replace(":", "_") or "local", *segments)


def fetch(
    url: str, target: Path, sha256: Optional[str] = None, offline: Optional[bool] = None, progress: bool = True
) -> Path:
    """`url` at `target`: a cached file checked against its recorded digest (and `sha256`), else downloaded."""
    if not target.exists():
        if is_offline(offline):
            raise FileNotFoundError(
                f"offline ({OFFLINE_ENV}): {url} is not in the cache (it would be {target}); fetch it where the "
                f"network is reachable (spacy elmo download NAME_OR_URL) and copy the cache folder, or point "
                f"{CACHE_ENV} at a copy"
            )
        with _download_lock(target):  # another process fetching the same file: wait for it, then reuse it
            if not target.exists():
                _download(url, target, sha256, progress)
                return target
    _check_cached(url, target, sha256)
    return target


def _download(url: str, target: Path, sha256: Optional[str], progress: bool) -> None:
    import pooch
    import requests

    downloader = _ResumingDownloader(target.with_name(target.name + PARTIAL_SUFFIX), sha256, progress)
    fetcher = pooch.create(
        path=target.parent, base_url="", registry={target.name: None}, urls={target.name: url}, retry_if_failed=RETRIES
    )
    try:
        fetcher.fetch(target.name, downloader=downloader)
    except _Refused as err:
        raise DownloadError(str(err)) from None
    except requests.RequestException as err:
        kept = downloader.part.stat().st_size if downloader.part.exists() else 0
        raise DownloadError(
            f"{url}: {err} (after {RETRIES + 1} tries); run again to resume from the {kept} bytes kept in "
            f"{downloader.part}"
        ) from None
    _record_digest(target, downloader.sha256 or sha256_of_file(target))


@contextlib.contextmanager
def _download_lock(target: Path) -> Iterator[None]:
    """An exclusive flock on `.NAME.lock` beside `target`, never removed (others may be waiting on it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no lock; the rename into place still never shows a partial file
        yield
        return
    with open(target.with_name(f".{target.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _ResumingDownloader:
    """A pooch downloader that resumes `part` with a Range request and hands it to pooch only when whole
    (the announced length, and `sha256` when given)."""

    def __init__(self, part: Path, sha256: Optional[str], progress: bool) -> None:
        self.part, self.expected, self.progress = part, sha256, progress
        self.sha256: Optional[str] = None

    def __call__(self, url: str, output_file: str, pooch: Any) -> None:
        import requests
        from tqdm import tqdm

        have = self.part.stat().st_size if self.part.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        with requests.get(url, headers=headers, stream=True, timeout=TIMEOUT_S) as response:
            _refuse_answer(url, response)
            resumed = have > 0 and response.status_code == 206
            if resumed and not response.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
                resumed = False  # not the range asked for: start again
            length = int(response.headers.get("Content-Length", -1))
            total = (have if resumed else 0) + length if length >= 0 else None
            digest = sha256_of_file(self.part, hasher=True) if resumed else hashlib.sha256()
            bar = tqdm(
                total=total,
                initial=have if resumed else 0,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=self.part.name[: -len(PARTIAL_SUFFIX)],
                file=sys.stderr,
                disable=not self.progress,
            )
            # unbuffered: each chunk reaches the file at once, so a killed process leaves all it received
            with open(self.part, "ab" if resumed else "wb", buffering=0) as out, bar:
                for chunk in response.iter_content(CHUNK_BYTES):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
                os.fsync(out.fileno())
        size = self.part.stat().st_size
        if total is not None and size != total:  # a network error: pooch tries again, resuming
            raise requests.exceptions.ChunkedEncodingError(f"{url}: the body ended at {size} of {total} bytes")
        self.sha256 = digest.hexdigest()
        if self.expected and self.sha256 != self.expected.lower():
            self.part.unlink()
            raise _Refused(
                f"{url}: SHA-256 {self.sha256} differs from the catalog's {self.expected}; the download was removed"
            )
        os.replace(self.part, output_file)  # pooch then renames it into place


def _refuse_answer(url: str, response: "requests.Response") -> None:
    """Refuse a 4xx (but 408, 429) or an HTML page; a 5xx raises HTTPError, which pooch tries again."""
    status = response.status_code
    if 400 <= status < 500 and status not in (408, 429):
        raise _Refused(f"{url}: HTTP {status} {response.reason}")
    response.raise_for_status()
    if response.headers.get("Content-Type", "").lower().startswith("text/html"):
        raise _Refused(f"{url}: the server sent an HTML page, not a model file (an error or login page?)")


def sha256_of_file(path: Path, hasher: bool = False) -> Any:
    """The SHA-256 of a file (hex), or with `hasher` the hash object, to go on with."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(block)
    return digest if hasher else digest.hexdigest()


def _record_digest(target: Path, sha256: str) -> None:
    record = target.with_name(target.name + DIGEST_SUFFIX)
    temporary = record.with_name(record.name + ".tmp")
    temporary.write_text(f"{sha256}  {target.name}\n", encoding="utf-8")
    os.replace(temporary, record)


def _check_cached(url: str, target: Path, sha256: Optional[str]) -> None:
    """Refuse a cached file changed since its download (or unlike `sha256`); one without a record gets one."""
    actual = sha256_of_file(target)
    record = target.with_name(target.name + DIGEST_SUFFIX)
    recorded = record.read_text(encoding="utf-8").split()[0] if record.exists() else None
    for expected, what in ((recorded, f"recorded in {record.name} at its download"), (sha256, "the catalog's")):
        if expected and actual != expected.lower():
            raise DownloadError(
                f"{target}: changed since it was downloaded from {url} (SHA-256 {actual}, {what} {expected}); "
                "remove it to download it again"
            )
    if recorded is None:
        _record_digest(target, actual)
