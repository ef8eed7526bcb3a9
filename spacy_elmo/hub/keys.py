"""Where a URL's file lives in the download cache, and the URL as it may be shown.

A URL is normalised first (RFC 3986, section 6.2.2: scheme and host lowercased, the default port dropped,
escapes of unreserved characters decoded and the others' hex upper-cased, `.` and `..` segments removed as
section 5.2.4 says, so `/a/../../m.zip` is `/m.zip`; the fragment, which is never sent, dropped), so that one
resource has one key however it was written. Its file goes in `SCHEME/HOST[_PORT]/FOLDER.../LEAF/NAME`:

- FOLDER...: the URL's folders made safe (ASCII letters, digits and `._+~-`; no name starts with `.`) and
  short, for a person browsing the cache; lossy (two URLs may share them) and never holding `@`;
- LEAF: `NAME@KEY`, KEY the first 20 hex digits of the SHA-256 of the normalised URL (its query included,
  credentials not): what makes the place of each URL its own. No folder name holds `@`, so a leaf is never
  the folder of another URL's file, and a leaf holds files only (its file, the options and companion files
  of a two-file model, and their records), never a folder: a tarball is unpacked elsewhere (`unpack`);
- NAME: the last segment made safe and short, keeping its suffix (`.zip`, `.hdf5`), by which the loader
  reads it; a query never touches it.

Credentials (`user:pw@`) are never part of a path or of a shown URL: `request_parts` hands them to the
request apart from the URL.
"""

import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import Optional
from urllib.parse import unquote, urlsplit, urlunsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
KEY_HEX = 20  # 80 bits of SHA-256: two URLs sharing a leaf is as likely as a collision of the hash
MAX_FOLDER_CHARS = 48  # each folder name, then shortened with a hash
MAX_FOLDERS_CHARS = 120  # all the folders together; the rest become one folder named by their hash
MAX_NAME_CHARS = 80  # the file's name (suffix included)
MAX_SUFFIX_CHARS = 12
UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Windows refuses these as file names, whatever their suffix
DEVICE_NAMES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))})
_UNSAFE = re.compile(r"[^A-Za-z0-9._+~-]")
# an escape, or a character a URL cannot hold as it is (neither reserved nor unreserved)
_TOKEN = re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9._~!$&'()*+,;=:@/?#\[\]-]")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


class DownloadError(ValueError):
    """A download refused or failed (here: a URL that cannot be placed); the message names the URL or the
    cached file."""


def normalise_url(url: str) -> str:
    """`url` in its normal form (credentials kept: they are needed to fetch it); a DownloadError naming the URL
    if it is not an http(s) URL with a host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as err:
        raise DownloadError(f"{_strip_userinfo(url)} is not a valid URL: {err}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise DownloadError(f"{_strip_userinfo(url)} is not an http(s) URL with a host")
    host = parts.hostname.lower()  # urlsplit lowercases it already; said for the reader
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    userinfo = parts.netloc.rpartition("@")[0]  # "" without one
    shown_port = f":{port}" if port and port != DEFAULT_PORTS[scheme] else ""
    netloc = (f"{userinfo}@" if userinfo else "") + host + shown_port
    path = _remove_dot_segments(_normalise_escapes(parts.path) or "/")
    return urlunsplit((scheme, netloc, path, _normalise_escapes(parts.query), ""))


def shown_url(url: str) -> str:
    """The normalised URL without credentials: what messages print and what the cache key is made of."""
    return _strip_userinfo(normalise_url(url))


def request_parts(url: str) -> tuple[str, Optional[tuple[str, str]]]:
    """The URL to request (normalised, no credentials) and the credentials to send with it, if any: the
    credentials travel as an auth header, so they appear in no URL requests or pooch print."""
    normal = normalise_url(url)
    parts = urlsplit(normal)
    if parts.username is None and parts.password is None:
        return normal, None
    return _strip_userinfo(normal), (unquote(parts.username or ""), unquote(parts.password or ""))


def url_key(url: str) -> str:
    """What tells one URL's cached file from another's: a hash of the normalised URL without credentials."""
    return hashlib.sha256(shown_url(url).encode("utf-8")).hexdigest()[:KEY_HEX]


def cache_path(url: str, root: Path) -> Path:
    """The cached file of `url` under the cache folder `root` (the layout of the module docstring)."""
    parts = urlsplit(shown_url(url))
    port = parts.port
    host = _safe_name(parts.hostname or "", MAX_FOLDER_CHARS) + (f"_{port}" if port else "")
    *folders, last = parts.path.split("/")[1:]  # the path starts with "/"
    name = _safe_name(unquote(last) or "index", MAX_NAME_CHARS, keep_suffix=True)
    leaf = f"{_safe_name(name, MAX_FOLDER_CHARS, keep_suffix=True)}@{url_key(url)}"
    return root.joinpath(parts.scheme, host, *_folder_names(folders), leaf, name)


def _folder_names(segments: list[str]) -> list[str]:
    """The URL's folders as safe names; past MAX_FOLDERS_CHARS, the rest as one name hashed from them."""
    names: list[str] = []
    used = 0
    for index, segment in enumerate(segments):
        name = _safe_name(unquote(segment) or "_", MAX_FOLDER_CHARS)
        if used + len(name) > MAX_FOLDERS_CHARS:
            rest = "/".join(segments[index:])
            names.append("~" + hashlib.sha256(rest.encode("utf-8")).hexdigest()[:12])
            break
        names.append(name)
        used += len(name) + 1
    return names


def _safe_name(text: str, limit: int, keep_suffix: bool = False) -> str:
    """`text` as a file or folder name every system takes: safe characters only (no `@`, no leading `.`),
    no device name, at most `limit` characters (the rest replaced by a hash of the whole, the suffix kept)."""
    suffix = PurePosixPath(text).suffix if keep_suffix else ""
    if len(suffix) > MAX_SUFFIX_CHARS or _UNSAFE.search(suffix):
        suffix = ""
    stem = _UNSAFE.sub("_", text[: len(text) - len(suffix)] if suffix else text)
    if not stem or stem.startswith(".") or stem.split(".")[0].lower() in DEVICE_NAMES:
        stem = "_" + stem
    if stem.endswith("."):  # Windows drops a trailing dot
        stem += "_"
    if len(stem) + len(suffix) > limit:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        stem = stem[: max(limit - len(suffix) - 13, 1)] + "~" + digest
    return stem + suffix


def _normalise_escapes(text: str) -> str:
    """Decode the escapes of unreserved characters (`%7E` is `~`), upper-case the others (`%2f` is `%2F`),
    and escape what a URL cannot hold as it is (a space, a stray `%`, non-ASCII), as requests would."""

    def one(match: "re.Match[str]") -> str:
        token = match.group(0)
        if len(token) == 3 and token[0] == "%":
            char = chr(int(token[1:], 16))
            return char if char in UNRESERVED else token.upper()
        return "".join(f"%{byte:02X}" for byte in token.encode("utf-8", "surrogatepass"))

    return _TOKEN.sub(one, text)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986, section 5.2.4, on an absolute path: `.` dropped, `..` removes the segment before it (none
    above the root), so the path never climbs out of the host."""
    out: list[str] = []
    segments = path.split("/")[1:]
    for index, segment in enumerate(segments):
        if segment in (".", ".."):
            if segment == ".." and out:
                out.pop()
            if index == len(segments) - 1:  # `/a/b/..` is the folder `/a/`
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


def _strip_userinfo(url: str) -> str:
    """`url` without `user:pw@` (by pattern: it must work on a URL urlsplit refuses)."""
    return _USERINFO.sub(r"\1", url)
