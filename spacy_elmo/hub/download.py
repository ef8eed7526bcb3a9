"""Published models by name or URL, fetched once into a per-user cache that holds only verified bytes.

`resolve_model_source` passes a local path or a shipped model's name through (no catalog is read for
either) and turns a catalog name or an http(s) URL into a path in the cache (`cache`, else
`SPACY_ELMO_CACHE`, else the user cache folder), where `keys` gives each URL's file a folder of its own. A
bilm-tf model published as two files lands in one folder (`options.json` and the weights), with its
companion files (an "alignment" matrix) beside them; a weights URL not in the catalog finds its options
as `X_options.json` (AllenNLP's naming), else `options.json` beside it. A tarball (by its URL, a "tfhub"
entry's module, or a local path) is unpacked once it is verified (`unpack`).

Downloads go through pooch (its retries) with a downloader of our own (`transfer`). Each file's SHA-256 is
recorded beside it (`NAME.sha256`) and checked at every reuse; a file whose record is missing, empty or
unreadable is trusted again only once it reads as its format (offline too, and without fetching gigabytes
again). Credentials in a URL are sent, never stored in a path or printed. Offline (`offline=True` or
`SPACY_ELMO_OFFLINE=1`), what is missing is named, not fetched.
"""

import os
import re
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from ..disk import OPTIONS_FILE, WEIGHT_SUFFIXES, PathLike, atomic_write_text, exclusive_lock, file_sha256
from .catalog import (
    ARCHIVE_ROLE,
    COMPANION_ROLES,
    CatalogEntry,
    close_names,
    entry_for_url,
    find_entry,
    load_catalog,
    looks_like_name,
    other_scheme,
    unknown_name_message,
)
from .checks import format_problem
from .keys import cache_path, request_parts, shown_url
from .transfer import PARTIAL_SUFFIX, DownloadError, NotOnServer, Refused, ResumingDownloader, read_validator
from .unpack import intact, is_tarball_name, unpacked

CACHE_ENV = "SPACY_ELMO_CACHE"
OFFLINE_ENV = "SPACY_ELMO_OFFLINE"
RETRIES = 3  # tries after the first; each resumes where the last one broke off, when the server allows
DIGEST_SUFFIX = ".sha256"
# where spacy_elmo/models is (io.resolve.SHIPPED_MODELS_DIR; the hub may not import io)
SHIPPED_MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


def is_url(spec: PathLike) -> bool:
    return str(spec).startswith(("http://", "https://"))


def is_offline(offline: Optional[bool] = None) -> bool:
    if offline is not None:
        return offline
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir(cache: Optional[PathLike] = None) -> Path:
    """The cache folder: `cache`, else `SPACY_ELMO_CACHE`, else the user cache folder (XDG on Linux); one
    that is a file is refused naming where it was set."""
    if cache:
        folder, source = Path(cache).expanduser(), "the cache folder given (--cache)"
    elif os.environ.get(CACHE_ENV):
        folder, source = Path(os.environ[CACHE_ENV]).expanduser(), CACHE_ENV
    else:
        import pooch  # type: ignore[import-untyped]  # (platformdirs); importing pooch imports no HTTP library

        folder, source = Path(pooch.os_cache("spacy-elmo")), "the user cache folder"
    if folder.exists() and not folder.is_dir():
        raise DownloadError(
            f"{source} is {folder}, which is a file, not a folder: point {CACHE_ENV} (or --cache) at a folder"
        )
    return folder


def is_shipped_name(text: str) -> bool:
    """Whether `text` names a model shipped in the package (`en_elmo_small`): resolved without a catalog."""
    plain = bool(text) and not any(c in text for c in "/\\:") and text not in (".", "..")
    return plain and path_exists(SHIPPED_MODELS_DIR / text)


def path_exists(path: Path) -> bool:
    """Whether `path` exists; not if the system refuses its name (too long, a NUL), so that such a name is
    reported as a missing path, not as an OSError."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def resolve_model_source(
    spec: PathLike, cache: Optional[PathLike] = None, offline: Optional[bool] = None, progress: bool = True
) -> Path:
    """A local path for `spec` (a name or URL fetched into the cache once; a local tarball unpacked into it); a
    `publisher/model` name the catalog lacks is refused with the names close to it, anything else returned as
    a path for the caller to judge."""
    text = str(spec)
    if is_url(text):
        return download_url(text, cache, offline, progress)
    if path_exists(Path(text)) or is_shipped_name(text):  # neither needs the catalog, which may be unreadable
        path = Path(spec)
        if is_tarball_name(path.name) and path.is_file():
            return unpacked(path, cache_dir(cache))
        return path
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
    """Fetch a catalog entry (or check its cached copy), its companion files too: the archive (a tarball's
    unpacked folder), or a two-file model's folder."""
    files = local_files(entry.urls, cache)
    archive = files.get(ARCHIVE_ROLE)
    folder = None
    if entry.is_tarball and archive is not None:
        recorded, stated = _read_record(archive), entry.sha256.get(ARCHIVE_ROLE)
        folder = intact(cache_dir(cache), recorded) if not stated or stated.lower() == recorded else None
    for role, path in files.items():
        if role != ARCHIVE_ROLE or folder is None:  # an intact unpacked folder: its tarball is not read again
            fetch(entry.urls[role], path, entry.sha256.get(role), offline, progress)
    if archive is None:
        return files["weights"].parent
    if not entry.is_tarball:
        return archive
    return folder or unpacked(archive, cache_dir(cache), _read_record(archive))


def download_url(
    url: str, cache: Optional[PathLike] = None, offline: Optional[bool] = None, progress: bool = True
) -> Path:
    """Fetch the model at `url`: its catalog entry, a weights file with the options beside it, or an archive."""
    entry = entry_for_url(url)
    if entry is not None:
        return download_entry(entry, cache, offline, progress)
    shown = shown_url(url)
    path = urlsplit(shown).path.lower()
    if path.endswith(".json"):
        raise DownloadError(f"{shown} is an options file: give the URL of the model's weights (.hdf5) or archive")
    if not path.endswith(WEIGHT_SUFFIXES):
        return download_entry(CatalogEntry(url, "", "", "", {ARCHIVE_ROLE: url}, {}), cache, offline, progress)
    candidates = options_urls_for(url)
    urls = {"options": candidates[0], "weights": url}
    files = local_files(urls, cache)
    _fetch_first(candidates, files["options"], offline, progress, url)
    fetch(url, files["weights"], None, offline, progress)
    return files["weights"].parent


def options_urls_for(weights_url: str) -> list[str]:
    """Where the options of a weights file may be, in the order tried: by AllenNLP's naming
    (`X_weights.hdf5` -> `X_options.json`; `lm_weights.hdf5` -> `lm_options.json`), then `options.json`
    beside it (bilm-tf's and the NLPL repository's naming, which the first would miss)."""
    parts = urlsplit(weights_url)
    folder, _, name = parts.path.rpartition("/")
    stem = name.rsplit(".", 1)[0]
    names = [stem[: -len("weights")] + OPTIONS_FILE] if stem.endswith("weights") else []
    return [parts._replace(path=f"{folder}/{n}", query="", fragment="").geturl() for n in [*names, OPTIONS_FILE]]


def local_files(urls: dict[str, str], cache: Optional[PathLike] = None) -> dict[str, Path]:
    """Where each URL of a model lives in the cache; a two-file model's options, and its companion files
    (`COMPANION_ROLES`), in the folder of its weights (or of its archive); a role not known here has none."""
    root = cache_dir(cache)
    if ARCHIVE_ROLE in urls:
        files = {ARCHIVE_ROLE: cache_path(urls[ARCHIVE_ROLE], root)}
    else:
        weights = cache_path(urls["weights"], root)
        if not weights.name.lower().endswith(WEIGHT_SUFFIXES):  # it shares a folder with options.json
            raise DownloadError(f"{shown_url(urls['weights'])}: a model's weights must be an .hdf5 or .h5 file")
        files = {"options": weights.with_name(OPTIONS_FILE), "weights": weights}
    folder = next(iter(files.values())).parent
    for role, url in urls.items():
        if role not in COMPANION_ROLES:
            continue
        name = cache_path(url, root).name
        if name.lower().endswith(WEIGHT_SUFFIXES) or name in {path.name for path in files.values()}:
            raise DownloadError(
                f"{shown_url(url)}: the {role} file of a model cannot be {name!r} beside it (a second weight file, "
                "or a name the model's files have)"
            )
        files[role] = folder / name
    return files


def is_cached(entry: CatalogEntry, cache: Optional[PathLike] = None) -> bool:
    """Whether every file of `entry` is in the cache."""
    return all(path.exists() for path in local_files(entry.urls, cache).values())


def fetch(
    url: str,
    target: Path,
    sha256: Optional[str] = None,
    offline: Optional[bool] = None,
    progress: bool = True,
) -> Path:
    """`url` at `target`: a cached file checked against its recorded digest (and `sha256`), else downloaded."""
    shown = shown_url(url)
    if not target.exists():
        if is_offline(offline):  # nothing to write: a read-only copy of a cache works
            raise FileNotFoundError(
                f"offline ({OFFLINE_ENV}): {shown} is not in the cache (it would be {target}); {FETCH_ELSEWHERE}"
            )
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a file where a folder of the cache should be
            raise DownloadError(
                f"cannot make the cache folder {target.parent} ({err}); point {CACHE_ENV} (or --cache) at a folder "
                "that can be written"
            ) from None
        # another process fetching the same file: wait for it, then reuse it
        with exclusive_lock(target.with_name(f".{target.name}.lock")):
            if not target.exists():
                _download(url, target, sha256, progress)
                return target
    _check_cached(shown, target, sha256)
    return target


# what a machine that cannot reach a model's host does instead (said offline and after a network error)
FETCH_ELSEWHERE = (
    "fetch it where the network is reachable (spacy elmo download NAME_OR_URL) and copy the cache folder, or "
    f"point {CACHE_ENV} at a copy"
)


def _fetch_first(urls: list[str], target: Path, offline: Optional[bool], progress: bool, weights: str) -> Path:
    """The first of `urls` the server has, at `target` (the options of a weights file, by either naming)."""
    for url in urls:
        try:
            return fetch(url, target, None, offline, progress)
        except NotOnServer:
            continue
    raise DownloadError(
        f"{shown_url(weights)}: no options found beside it ({' and '.join(shown_url(u) for u in urls)} are not on the "
        "server); give the URL of an archive, or download both files and give the folder"
    )


def _download(url: str, target: Path, sha256: Optional[str], progress: bool) -> None:
    import pooch
    import requests

    shown = shown_url(url)
    downloader = ResumingDownloader(url, shown, target.with_name(target.name + PARTIAL_SUFFIX), sha256, progress)
    downloader.fallback = scheme_fallback(url)
    fetcher = pooch.create(  # pooch logs the URL it is given: the one without credentials
        path=target.parent,
        base_url="",
        registry={target.name: None},
        urls={target.name: shown},
        retry_if_failed=RETRIES,
    )
    try:
        fetcher.fetch(target.name, downloader=downloader)
    except Refused as err:
        raise (NotOnServer if err.missing else DownloadError)(_scrub(str(err), url)) from None
    except requests.RequestException as err:
        kept = downloader.part.stat().st_size if downloader.part.exists() else 0
        then = (
            f"run again to resume from the {kept} bytes kept in {downloader.part}"
            if kept and read_validator(downloader.validator_file, shown)
            else "run again to download it again"
        )
        if isinstance(err, (requests.ConnectionError, requests.Timeout)):  # the host may be out of reach from here
            then += f"; if this machine cannot reach {urlsplit(shown).netloc}, {FETCH_ELSEWHERE}"
        raise DownloadError(_scrub(f"{shown}: {err} (after {RETRIES + 1} tries); {then}", url)) from None
    _record_digest(target, downloader.sha256 or file_sha256(target))


def scheme_fallback(url: str) -> Optional[str]:
    """Where to try `url` when its host cannot be connected to (refused, no TLS, no route): over https for an
    http URL; over http for an https URL only where the catalog lists it (the publisher gives the host; a
    downgrade for any other URL is not made behind the user's back). Not after an HTTP answer: a 404 or a
    wrong digest is the file's, whatever the scheme."""
    other = other_scheme(url)
    if other is None or other.startswith("https://"):
        return other
    try:
        return other if entry_for_url(url) is not None else None
    except ValueError:  # a catalog that cannot be read vouches for nothing
        return None


def _record_digest(target: Path, sha256: str) -> None:
    atomic_write_text(target.with_name(target.name + DIGEST_SUFFIX), f"{sha256}  {target.name}\n")


def _read_record(target: Path) -> Optional[str]:
    """The digest recorded beside `target`; None if the record is missing, empty or not a digest."""
    try:
        words = target.with_name(target.name + DIGEST_SUFFIX).read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return None
    return words[0].lower() if words and _HEX_DIGEST.fullmatch(words[0]) else None


def _check_cached(shown: str, target: Path, sha256: Optional[str]) -> None:
    """Refuse a cached file changed since its download (or unlike `sha256`). One with no readable record
    is trusted again only if it reads as its format (or matches `sha256`): the check a fresh download
    passes, made offline, without fetching it again; then it is recorded."""
    actual = file_sha256(target)
    record = target.with_name(target.name + DIGEST_SUFFIX)
    recorded = _read_record(target)
    again = f"remove {target} to fetch it again (at its next use, or now: spacy elmo download {shown})"
    for expected, what in ((recorded, f"recorded in {record.name} at its download"), (sha256, "the catalog's")):
        if expected and actual != expected.lower():
            raise DownloadError(
                f"{target}: changed since it was downloaded from {shown} (SHA-256 {actual}, {what} {expected}); {again}"
            )
    if recorded is None:
        problem = None if sha256 else format_problem(target)
        if problem:
            raise DownloadError(
                f"{target} (from {shown}) has no readable digest record ({record.name}) and {problem}; {again}"
            )
        _record_digest(target, actual)


def _scrub(message: str, url: str) -> str:
    """`message` without the credentials of `url`, wherever an exception's text may have put them."""
    try:
        _, auth = request_parts(url)
    except ValueError:
        return message
    for secret in auth or ():
        if len(secret) >= 3:
            message = message.replace(secret, "***")
    return message
