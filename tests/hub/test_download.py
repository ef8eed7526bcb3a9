"""Models by name or URL, fetched from a local HTTP server into a test cache: one download then cache hits,
a broken or killed download never taken as complete and resumed, refusals that name the URL or file, a
two-file bilm-tf model as one model, offline use, close names for an unknown one. (What a hostile server
sends and a damaged cache holds: test_cache_integrity.py.)"""

import concurrent.futures
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import tqdm

from fixture_paths import ELMO_FIXTURE
from http_files import zip_of
from kills import at_call, run_killed
from spacy_elmo.hub import download
from spacy_elmo.hub.download import DownloadError, options_urls_for, resolve_model_source
from spacy_elmo.hub.keys import url_key
from spacy_elmo.io.resolve import load_model

# a zip of 16 KiB exactly (a cached file is checked as the format it claims; half of it is 8 whole KiB)
ARCHIVE = zip_of({"data.bin": (bytes(range(256)) * 64)[:16270]})
assert len(ARCHIVE) == 16384
pytestmark = pytest.mark.timeout(120)  # every test here waits on a local server or a process


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def serve_archive(server, use_catalog, **entry) -> str:
    server.files["models/m.zip"] = ARCHIVE
    use_catalog([{"name": "test/zip", "urls": {"archive": server.url("models/m.zip")}, **entry}])
    return server.url("models/m.zip")


def test_a_catalog_model_is_downloaded_once_then_taken_from_the_cache(server, cache, use_catalog):
    serve_archive(server, use_catalog)
    first = resolve_model_source("test/zip", progress=False)
    assert first.read_bytes() == ARCHIVE and first.is_relative_to(cache)
    assert first.with_name("m.zip.sha256").read_text().split() == [sha256(ARCHIVE), "m.zip"]
    assert resolve_model_source("test/zip") == first
    assert server.hits("models/m.zip") == [None]  # the second one was a cache hit
    assert sorted(p.name for p in first.parent.iterdir()) == [".m.zip.lock", "m.zip", "m.zip.sha256"]


def test_a_url_is_cached_under_its_host_and_path(server, cache):
    server.files["a/b/model.zip"] = ARCHIVE
    url = server.url("a/b/model.zip")
    path = resolve_model_source(url, progress=False)
    # the layout of 0.2: SCHEME/HOST_PORT/FOLDERS/NAME@KEY/NAME, KEY a hash of the normalised URL
    host = f"127.0.0.1_{server.httpd.server_port}"
    assert path == cache.joinpath("http", host, "a", "b", f"model.zip@{url_key(url)}", "model.zip")
    assert path.read_bytes() == ARCHIVE


def test_a_download_cut_short_is_not_taken_as_complete_and_is_resumed(server, cache, use_catalog):
    serve_archive(server, use_catalog)
    server.cut_once.add("models/m.zip")
    path = resolve_model_source("test/zip", progress=False)
    assert path.read_bytes() == ARCHIVE
    assert server.hits("models/m.zip") == [None, f"bytes={len(ARCHIVE) // 2}-"]  # the second try resumed
    assert not path.with_name("m.zip.part").exists()


def test_a_partial_file_is_redone_when_the_server_ignores_ranges(server, cache, use_catalog):
    url = serve_archive(server, use_catalog)
    server.ranges = False
    part = download.local_files({"archive": url})["archive"].with_name("m.zip.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"stale bytes of another download")
    # with the validator it was fetched under (without one it is fetched whole: test_cache_integrity.py)
    validator = {"url": url, "if_range": '"stale"', "etag": '"stale"', "last_modified": None, "length": None}
    part.with_name("m.zip.part.validator").write_text(json.dumps(validator))
    assert resolve_model_source("test/zip", progress=False).read_bytes() == ARCHIVE
    assert server.hits("models/m.zip") == ["bytes=31-"]


@pytest.mark.slow  # forks a process
def test_a_killed_download_leaves_no_complete_looking_file_and_is_resumed(server, cache, use_catalog):
    url = serve_archive(server, use_catalog)
    target = download.local_files({"archive": url})["archive"]
    # SIGKILL right after the fourth KiB was written and counted
    run_killed(lambda: resolve_model_source("test/zip"), at_call(tqdm.tqdm, "update", after=True, n=4))
    assert not target.exists() and not target.with_name("m.zip.sha256").exists()
    kept = target.with_name("m.zip.part").stat().st_size
    assert 0 < kept < len(ARCHIVE)
    assert resolve_model_source("test/zip", progress=False).read_bytes() == ARCHIVE
    assert server.hits("models/m.zip")[-1] == f"bytes={kept}-"


def test_two_at_once_download_once(server, cache, use_catalog):
    serve_archive(server, use_catalog)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda _: resolve_model_source("test/zip", progress=False), range(2)))
    assert paths[0] == paths[1] and paths[0].read_bytes() == ARCHIVE
    assert server.hits("models/m.zip") == [None]  # the second waited for the first and took its file


def test_a_digest_mismatch_is_refused_naming_the_url_and_both_digests(server, cache, use_catalog):
    wrong = "0" * 64
    url = serve_archive(server, use_catalog, sha256={"archive": wrong})
    with pytest.raises(DownloadError) as refused:
        resolve_model_source("test/zip", progress=False)
    assert url in str(refused.value) and wrong in str(refused.value) and sha256(ARCHIVE) in str(refused.value)
    assert len(server.hits("models/m.zip")) == 1  # not tried again
    target = download.local_files({"archive": url})["archive"]
    assert [p.name for p in target.parent.iterdir()] == [".m.zip.lock"]  # no file, no partial download


def test_the_stated_digest_is_accepted(server, cache, use_catalog):
    serve_archive(server, use_catalog, sha256={"archive": sha256(ARCHIVE).upper()})
    assert resolve_model_source("test/zip", progress=False).read_bytes() == ARCHIVE


def test_a_404_and_an_html_page_are_refused_naming_the_url(server, cache):
    with pytest.raises(DownloadError, match=r"missing\.zip: HTTP 404"):
        resolve_model_source(server.url("missing.zip"), progress=False)
    server.files["login.zip"] = b"<html><body>Please sign in</body></html>"
    server.content_types["login.zip"] = "text/html; charset=utf-8"
    with pytest.raises(DownloadError, match=r"login\.zip: the server sent an HTML page"):
        resolve_model_source(server.url("login.zip"), progress=False)
    assert len(server.hits("missing.zip")) == 1 and not any(cache.rglob("*.zip"))


def test_a_cached_file_changed_after_download_is_refused_naming_it(server, cache, use_catalog):
    serve_archive(server, use_catalog)
    path = resolve_model_source("test/zip", progress=False)
    path.write_bytes(ARCHIVE[:-1] + b"!")
    with pytest.raises(DownloadError, match="changed since it was downloaded") as refused:
        resolve_model_source("test/zip")
    assert str(path) in str(refused.value)


def test_offline_the_cache_is_used_and_what_is_missing_is_named(server, cache, use_catalog, monkeypatch):
    url = serve_archive(server, use_catalog)
    monkeypatch.setenv(download.OFFLINE_ENV, "1")
    with pytest.raises(FileNotFoundError, match="offline") as missing:
        resolve_model_source("test/zip")
    assert url in str(missing.value) and server.requests == []
    path = resolve_model_source("test/zip", offline=False, progress=False)
    assert resolve_model_source("test/zip") == path and len(server.requests) == 1


def serve_pair(server) -> dict[str, str]:
    server.files["elmo/tiny/tiny_options.json"] = (ELMO_FIXTURE / "options.json").read_bytes()
    server.files["elmo/tiny/tiny_weights.hdf5"] = (ELMO_FIXTURE / "lm_weights.hdf5").read_bytes()
    return {"options": server.url("elmo/tiny/tiny_options.json"), "weights": server.url("elmo/tiny/tiny_weights.hdf5")}


def test_a_two_file_bilm_tf_model_is_one_model(server, cache, use_catalog):
    use_catalog([{"name": "test/pair", "urls": serve_pair(server)}])
    folder = resolve_model_source("test/pair", progress=False)
    assert sorted(p.name for p in folder.iterdir() if not p.name.endswith((".sha256", ".lock"))) == [
        "options.json",
        "tiny_weights.hdf5",
    ]
    reference = load_model(ELMO_FIXTURE / "lm_weights.hdf5")
    assert load_model(folder).sha256 == reference.sha256  # the same options and weights, by role


def test_a_weights_url_finds_its_options_by_the_publishers_naming(server, cache, use_catalog):
    urls = serve_pair(server)
    use_catalog([])
    folder = resolve_model_source(urls["weights"], progress=False)
    assert (folder / "options.json").read_bytes() == (ELMO_FIXTURE / "options.json").read_bytes()
    assert server.hits("elmo/tiny/tiny_options.json") == [None]
    allennlp = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/"
    assert options_urls_for(allennlp + "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5")[0] == (
        allennlp + "elmo_2x1024_128_2048cnn_1xhighway_options.json"
    )
    assert options_urls_for("https://example.org/m/model.hdf5?x=1")[0] == "https://example.org/m/options.json"


def test_a_weights_url_of_a_catalog_entry_takes_the_catalogs_options(server, cache, use_catalog):
    urls = serve_pair(server)
    server.files["elmo/tiny/odd_name.json"] = server.files.pop("elmo/tiny/tiny_options.json")
    urls["options"] = server.url("elmo/tiny/odd_name.json")
    use_catalog([{"name": "test/pair", "urls": urls}])
    folder = resolve_model_source(urls["weights"], progress=False)
    assert folder == resolve_model_source("test/pair") and (folder / "options.json").exists()


def test_local_paths_and_other_names_pass_through_untouched(tmp_path, cache):
    assert resolve_model_source(ELMO_FIXTURE) == ELMO_FIXTURE
    assert resolve_model_source("en_elmo_small") == Path("en_elmo_small")  # the shipped name, for resolve
    assert resolve_model_source("no/such/folder") == Path("no/such/folder")
    assert not cache.exists()


def test_an_unknown_name_lists_close_names(cache):
    with pytest.raises(FileNotFoundError, match=r"no model 'efml/rus' in the catalog .*close names: efml/ru"):
        resolve_model_source("efml/rus")
    with pytest.raises(FileNotFoundError, match="close names: allennlp/original"):
        resolve_model_source("allenlp/original")


@pytest.mark.slow  # starts a Python process
def test_importing_the_package_and_the_hub_imports_no_download_library():
    code = "import sys, spacy_elmo, spacy_elmo.hub, spacy_elmo.io.resolve; print('pooch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_a_url_and_a_catalog_name_give_the_pipe_the_layers_of_the_model_on_disk(
    cache, use_catalog, tmp_path, monkeypatch
):
    import numpy
    import spacy

    from http_files import serving

    def layers(nlp: spacy.Language) -> numpy.ndarray:
        return nlp("The cat sat on the mat .")._.elmo_layers

    def pipeline(path: str) -> spacy.Language:
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"model": {"path": path}})
        nlp.initialize()
        return nlp

    with serving() as server:
        server.files["e/tiny_options.json"] = (ELMO_FIXTURE / "options.json").read_bytes()
        server.files["e/tiny_weights.hdf5"] = (ELMO_FIXTURE / "lm_weights.hdf5").read_bytes()
        url = server.url("e/tiny_weights.hdf5")
        use_catalog([{"name": "test/tiny", "urls": {"options": server.url("e/tiny_options.json"), "weights": url}}])
        assert load_model(url).sha256 == load_model(ELMO_FIXTURE / "lm_weights.hdf5").sha256
        from_url, by_name = pipeline(url), pipeline("test/tiny")
        from_url_layers, by_name_layers = layers(from_url), layers(by_name)
    from_disk = layers(pipeline(str(ELMO_FIXTURE / "lm_weights.hdf5")))
    assert numpy.array_equal(from_url_layers, from_disk) and numpy.array_equal(by_name_layers, from_disk)
    assert len(server.requests) == 2  # the catalog name found the files the URL had fetched
    # the server gone: the cache serves a name; a saved pipeline never reads its path, even offline and uncached
    assert numpy.array_equal(layers(pipeline("test/tiny")), from_disk)
    by_name.to_disk(tmp_path / "saved")
    monkeypatch.setenv(download.OFFLINE_ENV, "1")
    monkeypatch.setenv(download.CACHE_ENV, str(tmp_path / "empty-cache"))
    assert numpy.array_equal(layers(spacy.load(tmp_path / "saved")), from_disk)


def test_a_body_always_cut_short_is_refused_naming_the_url(server, cache, use_catalog):
    url = serve_archive(server, use_catalog)
    server.cut_always.add("models/m.zip")
    with pytest.raises(DownloadError, match=rf"{url}") as refused:
        resolve_model_source("test/zip", progress=False)
    assert "\n" not in str(refused.value)
    assert not download.local_files({"archive": url})["archive"].exists()  # nothing that looks complete
    assert len(server.hits("models/m.zip")) == 1 + download.RETRIES
