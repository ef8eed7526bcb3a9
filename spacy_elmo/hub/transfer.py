"""One file fetched over HTTP into `NAME.part` (a pooch downloader: pooch retries): the server's validator
(a strong ETag, else Last-Modified) goes to `NAME.part.validator`, and a later try resumes with `Range` and
`If-Range`, so the server sends the rest only of the same file (a 206 whose validator or range differs is
dropped and the file fetched whole; a part with no validator is fetched whole). A body is kept only when
whole: its announced length, the catalog's digest when there is one, else read as the format it claims
(`checks`); an HTML page, an HTTP error or a wrong digest is refused (`Refused`: pooch does not retry it).
If a host cannot be connected to, the other scheme is asked (`download.scheme_fallback` says which).
"""

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

from ..disk import atomic_write_text, file_hash
from ..errors import first_line
from .checks import claimed_by_name, format_problem, is_html
from .keys import DownloadError, request_parts

if TYPE_CHECKING:
    import requests

TIMEOUT_S = 60.0  # of one connect or read, not of the whole download
CHUNK_BYTES = 1 << 20
PARTIAL_SUFFIX = ".part"
VALIDATOR_SUFFIX = ".validator"  # beside NAME.part: NAME.part.validator
MISSING_STATUSES = (404, 410)  # the URL names nothing: another name for the file may (options.json)


class NotOnServer(DownloadError):
    """The server has no file at the URL (HTTP 404 or 410)."""


class Refused(Exception):
    """What another try cannot mend (an HTTP 4xx, an HTML page, a wrong digest): pooch does not retry it."""

    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


class ResumingDownloader:
    """A pooch downloader that writes `part` and hands it to pooch only when whole and checked (the
    announced length; the catalog's digest, else the format the file claims). It resumes `part` only with
    the validator the server sent for it (`If-Range`), so the bytes after the break are of the same file."""

    def __init__(self, url: str, shown: str, part: Path, sha256: Optional[str], progress: bool) -> None:
        self.url, self.shown, self.part, self.expected, self.progress = url, shown, part, sha256, progress
        self.validator_file = part.with_name(part.name + VALIDATOR_SUFFIX)
        self.kind = claimed_by_name(part.with_suffix("").name)  # else what its first bytes claim
        self.sha256: Optional[str] = None
        self.address = url  # where the bytes are asked for: `url`, or `fallback` once only it could be reached
        self.fallback: Optional[str] = None  # the URL over the other scheme, tried if this one cannot connect

    def __call__(self, _url: str, output_file: str, _pooch: Any) -> None:
        import requests

        shown = self.shown
        have, validator = self._resumable(shown)
        while True:  # at most twice: a range refused or of another file, then the whole file
            headers = {"Accept-Encoding": "identity"}  # the bytes as stored: a length and digest of those
            if validator:
                headers["Range"], headers["If-Range"] = f"bytes={have}-", validator["if_range"]
            with self._get(shown, headers) as response:
                if validator and (response.status_code == 416 or _other_range(response, have, validator)):
                    self._discard()
                    have, validator = 0, None
                    continue
                _refuse_answer(shown, response)
                total = self._receive(shown, response, resumed=validator is not None and response.status_code == 206)
            break
        size = self.part.stat().st_size
        if total is not None and size < total:  # a network error: pooch tries again, resuming
            raise requests.exceptions.ChunkedEncodingError(f"the body ended at {size} of {total} bytes")
        if total is not None and size > total:
            self._discard()
            raise requests.exceptions.ChunkedEncodingError(f"{size} bytes arrived, {total} were announced")
        self._check(shown, confirmed=total is not None)
        os.replace(self.part, output_file)  # pooch then renames it into place
        self.validator_file.unlink(missing_ok=True)

    def _get(self, shown: str, headers: dict[str, str]) -> "requests.Response":
        """The response to a GET of the URL; if its host cannot be connected to, of `fallback` (the other
        scheme), which later tries then use. Only connecting falls back: an answer, whatever it says, is kept."""
        import requests

        address, auth = request_parts(self.address)
        try:
            return requests.get(address, headers=headers, auth=auth, stream=True, timeout=TIMEOUT_S)
        except requests.ConnectionError as err:
            if self.fallback is None:
                raise
            first = err
        other, auth = request_parts(self.fallback)
        scheme = urlsplit(other).scheme
        try:
            response = requests.get(other, headers=headers, auth=auth, stream=True, timeout=TIMEOUT_S)
        except requests.ConnectionError as again:
            raise requests.ConnectionError(f"{first}; over {scheme} too: {again}") from None
        print(f"{shown}: cannot connect ({first_line(first)}); fetching over {scheme}", file=sys.stderr)
        self.address, self.fallback = self.fallback, None  # the scheme that answered, for the next tries
        return response

    def _receive(self, shown: str, response: "requests.Response", resumed: bool) -> Optional[int]:
        """Write the body to `part` (after it, if `resumed`); the file's whole length, if the server said it."""
        from tqdm import tqdm

        have = self.part.stat().st_size if resumed else 0
        length = int(response.headers.get("Content-Length", -1))
        total: Optional[int] = have + length if length >= 0 else None
        stated = re.search(r"/(\d+)\s*$", response.headers.get("Content-Range", "")) if resumed else None
        if total is None and stated:  # a chunked 206 still says the length of the whole
            total = int(stated.group(1))
        if resumed:
            digest = file_hash(self.part)
        else:
            digest = hashlib.sha256()
            self._save_validator(shown, response, total)
        bar = tqdm(
            total=total,
            initial=have,
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
        self.sha256 = digest.hexdigest()
        return total

    def _check(self, shown: str, confirmed: bool) -> None:
        """Refuse the whole body unless it is the file: no HTML page; the catalog's digest, else its format
        (a body of no stated length that does not read may have been cut: that one pooch tries again)."""
        import requests

        if is_html(self.part):
            self._discard()
            raise Refused(f"{shown}: the server sent an HTML page, not a model file (an error or login page?)")
        if self.expected:
            if self.sha256 != self.expected.lower():
                self._discard()
                raise Refused(
                    f"{shown}: SHA-256 {self.sha256} differs from the catalog's {self.expected}; the download was "
                    "removed"
                )
            return
        problem = format_problem(self.part, self.kind)
        if problem is None:
            return
        self._discard()
        if confirmed:
            raise Refused(f"{shown}: the file sent {problem}; nothing was cached")
        raise requests.exceptions.ChunkedEncodingError(f"the body, of no stated length, {problem}")

    def _resumable(self, shown: str) -> tuple[int, Optional[dict[str, Any]]]:
        """The bytes kept and the validator to resume them with; (0, None), the part removed, if either is
        missing: bytes of unknown origin are never continued."""
        have = self.part.stat().st_size if self.part.exists() else 0
        validator = read_validator(self.validator_file, shown) if have else None
        if validator is None or (validator.get("length") is not None and have >= validator["length"]):
            self._discard()
            return 0, None
        return have, validator

    def _save_validator(self, shown: str, response: "requests.Response", total: Optional[int]) -> None:
        """Keep what proves a later response is of this file: a strong ETag, else Last-Modified (a weak ETag
        may not go in If-Range); none, no resuming."""
        etag = response.headers.get("ETag", "")
        modified = response.headers.get("Last-Modified", "")
        if_range = etag if etag.startswith('"') else modified
        if not if_range:
            self.validator_file.unlink(missing_ok=True)
            return
        record = {"url": shown, "if_range": if_range, "etag": etag or None, "last_modified": modified or None}
        atomic_write_text(self.validator_file, json.dumps({**record, "length": total}))

    def _discard(self) -> None:
        self.part.unlink(missing_ok=True)
        self.validator_file.unlink(missing_ok=True)


def read_validator(path: Path, shown: str) -> Optional[dict[str, Any]]:
    """The validator saved beside a part, if it is one and of this URL."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("url") != shown or not isinstance(record.get("if_range"), str):
        return None
    if not isinstance(record.get("length"), (int, type(None))):
        return None
    return record


def _other_range(response: "requests.Response", have: int, validator: dict[str, Any]) -> bool:
    """Whether a 206 is not the rest of the file the part holds: another range, another length, or another
    validator (a server that ignored If-Range)."""
    if response.status_code != 206:
        return False
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", response.headers.get("Content-Range", "").strip())
    if match is None or int(match.group(1)) != have:
        return True
    if validator.get("length") is not None and match.group(3) != str(validator["length"]):
        return True
    etag, modified = response.headers.get("ETag"), response.headers.get("Last-Modified")
    return bool(
        (etag and validator.get("etag") and etag != validator["etag"])
        or (modified and validator.get("last_modified") and modified != validator["last_modified"])
    )


def _refuse_answer(shown: str, response: "requests.Response") -> None:
    """Refuse a 4xx (but 408, 429) or an HTML page; a 5xx raises HTTPError, which pooch tries again."""
    status = response.status_code
    if 400 <= status < 500 and status not in (408, 429):
        raise Refused(f"{shown}: HTTP {status} {response.reason}", missing=status in MISSING_STATUSES)
    if status >= 400:
        import requests

        raise requests.HTTPError(f"{shown}: HTTP {status} {response.reason}")  # not requests' text: its URL
    if response.headers.get("Content-Type", "").lower().startswith("text/html"):
        raise Refused(f"{shown}: the server sent an HTML page, not a model file (an error or login page?)")
