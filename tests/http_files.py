"""A local HTTP server for the download tests (127.0.0.1, a free port, in a thread): no test touches the
network. It serves byte strings by path, answers Range requests (unless told not to), can cut a body short
(once, or every time), and records every request with its Range header. `write_catalog` writes a test
catalog of entries pointing at it."""

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class FileServer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.content_types: dict[str, str] = {}
        self.cut_once: set[str] = set()
        self.cut_always: set[str] = set()
        self.ranges = True
        self.requests: list[tuple[str, object]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/{path}"

    def hits(self, path: str) -> list[object]:
        """The Range header of each request for `path` (None: the whole file)."""
        return [ranged for asked, ranged in self.requests if asked == path]


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server: FileServer = self.server.owner  # type: ignore[attr-defined]
        path = self.path.lstrip("/")
        ranged = self.headers.get("Range")
        server.requests.append((path, ranged))
        body = server.files.get(path)
        if body is None:
            self.send_error(404)
            return
        start = int(ranged.split("=")[1].split("-")[0]) if ranged and server.ranges else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Type", server.content_types.get(path, "application/octet-stream"))
        self.send_header("Content-Length", str(len(body) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        payload = body[start:]
        if path in server.cut_once or path in server.cut_always:  # the connection drops half way
            server.cut_once.discard(path)
            payload = payload[: len(payload) // 2]
        self.wfile.write(payload)
        self.close_connection = True

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
