"""A local HTTP server for the download tests (127.0.0.1, a free port, in a thread): no test touches the
network. It serves byte strings by path with a validator (a strong ETag and a Last-Modified derived from
the bytes, unless told to send fewer), answers Range requests (unless told not to), honours If-Range
(unless told to ignore it, as a careless server would, sending a range of whatever it holds now), and can
misbehave as the download cache must withstand: cut a body short (once, or every time), send no
Content-Length (the body ends when the connection closes) or a chunked body, and change a file right after
cutting it. It records every request with its Range header (`hits`) and all its headers (`headers`). It
speaks no TLS: a connection that opens with a TLS handshake (https:// to its port) is closed at once and
counted (`tls_refused`), as a host that does not serve https refuses it.
`write_catalog` writes a test catalog of entries pointing at it; `zip_of` makes an archive to serve."""

import contextlib
import email.utils
import hashlib
import io
import json
import socket
import threading
import urllib.parse
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TLS_HANDSHAKE = b"\x16"  # the first byte of a TLS record that opens a handshake (a ClientHello)


class FileServer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.content_types: dict[str, str] = {}
        self.cut_once: set[str] = set()
        self.cut_always: set[str] = set()
        self.ranges = True
        self.validators: set[str] = {"etag", "last-modified"}  # sent with each file; fewer: set() or one
        self.if_range = True  # False: If-Range ignored, a range served from whatever the file is now
        self.no_length: set[str] = set()  # paths sent without Content-Length, the end told by closing
        self.chunked: set[str] = set()  # paths sent with Transfer-Encoding: chunked
        self.after_cut: dict[str, bytes] = {}  # a path's new bytes, in place once its body was cut
        self.requests: list[tuple[str, object]] = []
        self.received: list[tuple[str, dict[str, str]]] = []
        self.tls_refused = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.owner = self  # type: ignore[attr-defined]
        # a short poll: shutdown() waits for it, once per test
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/{path}"

    def hits(self, path: str) -> list[object]:
        """The Range header of each request for `path` (None: the whole file)."""
        return [ranged for asked, ranged in self.requests if asked == path]

    def headers(self, path: str, name: str) -> list[object]:
        """The header `name` of each request for `path` (None where it was not sent)."""
        return [headers.get(name.lower()) for asked, headers in self.received if asked == path]

    def validator_headers(self, body: bytes) -> dict[str, str]:
        digest = hashlib.sha256(body).hexdigest()
        headers = {}
        if "etag" in self.validators:
            headers["ETag"] = f'"{digest[:16]}"'
        if "last-modified" in self.validators:  # a date of its own for each content
            headers["Last-Modified"] = email.utils.formatdate(1_500_000_000 + int(digest[:7], 16), usegmt=True)
        return headers


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked bodies need it; every answer still closes its connection

    def handle(self) -> None:
        if self.connection.recv(1, socket.MSG_PEEK) == TLS_HANDSHAKE:  # https:// to a plain HTTP port
            self.server.owner.tls_refused += 1  # type: ignore[attr-defined]
            return  # closed without a word: the client's handshake fails
        super().handle()

    def do_GET(self) -> None:
        server: FileServer = self.server.owner  # type: ignore[attr-defined]
        path = urllib.parse.unquote(self.path.lstrip("/"))
        ranged = self.headers.get("Range")
        server.requests.append((path, ranged))
        server.received.append((path, {k.lower(): v for k, v in self.headers.items()}))
        self.close_connection = True
        body = server.files.get(path, server.files.get(path.partition("?")[0]))  # a query names the same file
        if body is None:
            self.send_error(404)
            return
        validators = server.validator_headers(body)
        if_range = self.headers.get("If-Range")
        same = if_range is None or not server.if_range or if_range in validators.values()
        start = int(ranged.split("=")[1].split("-")[0]) if ranged and server.ranges and same else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Type", server.content_types.get(path, "application/octet-stream"))
        self.send_header("Connection", "close")
        for name, value in validators.items():
            self.send_header(name, value)
        if path in server.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif path not in server.no_length:
            self.send_header("Content-Length", str(len(body) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        payload = body[start:]
        cut = path in server.cut_once or path in server.cut_always
        if cut:  # the connection drops half way
            server.cut_once.discard(path)
            payload = payload[: len(payload) // 2]
            if path in server.after_cut:
                server.files[path] = server.after_cut.pop(path)
        if path in server.chunked:
            for at in range(0, len(payload), 4096):
                piece = payload[at : at + 4096]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            if not cut:
                self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving() -> Iterator[FileServer]:
    files = FileServer()
    files.thread.start()
    try:
        yield files
    finally:
        files.httpd.shutdown()
        files.httpd.server_close()


def write_catalog(path: Path, models: list[dict]) -> Path:
    """A catalog file of these entries (language, format, description and a cited source filled in)."""
    source = {"page": "https://example.org/models", "licence": "CC-BY-4.0"}
    full = [{"language": "xx", "format": "bilm-tf", "description": "test", "source": "test", **m} for m in models]
    path.write_text(json.dumps({"sources": {"test": source}, "models": full}), encoding="utf-8")
    return path


def zip_of(members: dict[str, bytes]) -> bytes:
    """A zip archive of these members, stored (not deflated) and dated 2020: the same bytes at every call."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()
