"""The other scheme when one cannot be connected to: the catalog lists each URL with the scheme its source
gives (http for the NLPL repository), and a host that refuses that scheme is asked over the other one. The
local server speaks no TLS, so an https:// URL to its port is refused at the handshake while its http:// twin
is served. Only connecting falls back: a 404 or a wrong digest is an answer, kept whatever the scheme; an
https URL the catalog does not list is never fetched over http."""

import hashlib
import socket

import pytest

from fixture_paths import ELMO_FIXTURE
from http_files import zip_of
from spacy_elmo.hub import download
from spacy_elmo.hub.download import DownloadError, NotOnServer, resolve_model_source, scheme_fallback

ARCHIVE = zip_of({"data.bin": bytes(range(256)) * 8})

pytestmark = pytest.mark.timeout(120)


def https(url: str) -> str:
    assert url.startswith("http://")
    return "https://" + url[len("http://") :]


def test_a_host_refusing_https_is_fetched_over_http(server, cache, use_catalog):
    server.files["m/x.zip"] = ARCHIVE
    url = https(server.url("m/x.zip"))
    digest = hashlib.sha256(ARCHIVE).hexdigest()
    use_catalog([{"name": "test/x", "urls": {"archive": url}, "sha256": {"archive": digest}}])
    path = resolve_model_source("test/x", progress=False)
    assert path.read_bytes() == ARCHIVE and server.tls_refused == 1 and server.hits("m/x.zip") == [None]
    assert resolve_model_source("test/x") == path and server.tls_refused == 1  # cached under the catalog's URL


def test_the_fallback_is_said_on_stderr(server, cache, use_catalog, capsys):
    server.files["m/x.zip"] = ARCHIVE
    url = https(server.url("m/x.zip"))
    use_catalog([{"name": "test/x", "urls": {"archive": url}}])
    resolve_model_source("test/x", progress=False)
    err = capsys.readouterr().err
    assert f"{url}: cannot connect (" in err and "); fetching over http" in err


def test_a_two_file_model_falls_back_file_by_file(server, cache, use_catalog):
    server.files["e/tiny_options.json"] = (ELMO_FIXTURE / "options.json").read_bytes()
    server.files["e/tiny_weights.hdf5"] = (ELMO_FIXTURE / "lm_weights.hdf5").read_bytes()
    urls = {"options": https(server.url("e/tiny_options.json")), "weights": https(server.url("e/tiny_weights.hdf5"))}
    use_catalog([{"name": "test/pair", "urls": urls}])
    folder = resolve_model_source("test/pair", progress=False)
    assert (folder / "options.json").exists() and (folder / "tiny_weights.hdf5").exists()
    assert server.tls_refused == 2 and len(server.requests) == 2


def test_an_answer_is_kept_whatever_it_says(server, cache, use_catalog, monkeypatch):
    monkeypatch.setattr(download, "RETRIES", 0)
    server.files["m/x.zip"] = ARCHIVE
    missing = {"name": "test/missing", "urls": {"archive": server.url("m/gone.zip")}}
    other = {"name": "test/other", "urls": {"archive": server.url("m/x.zip")}, "sha256": {"archive": "0" * 64}}
    use_catalog([missing, other])
    with pytest.raises(NotOnServer, match="HTTP 404"):
        resolve_model_source("test/missing", progress=False)
    with pytest.raises(DownloadError, match="differs from the catalog's"):
        resolve_model_source("test/other", progress=False)
    assert server.tls_refused == 0  # neither was asked again over https
    assert [path for path, _ in server.requests] == ["m/gone.zip", "m/x.zip"]


def test_a_404_over_the_fallback_is_a_404(server, cache, use_catalog, monkeypatch):
    monkeypatch.setattr(download, "RETRIES", 0)
    use_catalog([{"name": "test/missing", "urls": {"archive": https(server.url("m/gone.zip"))}}])
    with pytest.raises(NotOnServer, match="HTTP 404"):
        resolve_model_source("test/missing", progress=False)
    assert server.tls_refused == 1 and server.hits("m/gone.zip") == [None]


def test_an_https_url_outside_the_catalog_is_never_fetched_over_http(server, cache, use_catalog, monkeypatch):
    monkeypatch.setattr(download, "RETRIES", 0)
    server.files["m/x.zip"] = ARCHIVE
    use_catalog([])
    with pytest.raises(DownloadError, match="cannot reach 127.0.0.1"):
        resolve_model_source(https(server.url("m/x.zip")), progress=False)
    assert server.tls_refused == 1 and server.requests == []


def test_an_http_host_out_of_reach_is_tried_over_https_too(cache, use_catalog, monkeypatch):
    monkeypatch.setattr(download, "RETRIES", 0)
    with socket.socket() as s:  # a port nothing listens on: both schemes are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/m.zip"
    use_catalog([{"name": "test/far", "urls": {"archive": url}}])
    with pytest.raises(DownloadError, match="over https too") as refused:
        resolve_model_source("test/far", progress=False)
    assert f"if this machine cannot reach 127.0.0.1:{port}" in str(refused.value)


def test_which_urls_have_a_fallback(use_catalog):
    use_catalog([{"name": "test/x", "urls": {"archive": "https://models.example/x.zip"}}])
    assert scheme_fallback("http://anywhere.example/m.zip") == "https://anywhere.example/m.zip"
    assert scheme_fallback("HTTP://anywhere.example:8080/m.zip") == "https://anywhere.example:8080/m.zip"
    assert scheme_fallback("https://models.example/x.zip") == "http://models.example/x.zip"  # the catalog's
    assert scheme_fallback("https://anywhere.example/m.zip") is None  # not the catalog's: no downgrade
    assert scheme_fallback("ftp://anywhere.example/m.zip") is None
