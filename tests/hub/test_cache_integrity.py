"""The download cache holds only verified bytes (issue 48), against a hostile local server and a damaged
cache: a file changed between two tries is never spliced; a body of no stated length, one as short as a
wrong announced length, an HTML page sent as binary and a chunked body cut short are never cached as good;
a missing, empty or unreadable digest record does not make damaged bytes good; URLs with queries,
fragments, dot segments, credentials and long names each get a place of their own in the cache; a
bilm-tf `lm_weights.hdf5` finds the `options.json` beside it; a broken catalog or cache setting is named."""

import base64
import hashlib
import logging
import re
from pathlib import Path

import pooch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixture_paths import ELMO_FIXTURE
from http_files import zip_of
from spacy_elmo.hub import download, keys
from spacy_elmo.hub.download import DownloadError, resolve_model_source
from spacy_elmo.io.resolve import load_model, resolve_model

pytestmark = pytest.mark.timeout(60)  # every test here but the pure ones waits on a local server

SIZE = 16270  # a zip of one stored member this long is 16 KiB: half of it is 8 whole KiB
OLD, NEW = zip_of({"data.bin": b"o" * SIZE}), zip_of({"data.bin": b"n" * SIZE})
HALF = len(OLD) // 2
OPTIONS = (ELMO_FIXTURE / "options.json").read_bytes()
WEIGHTS = (ELMO_FIXTURE / "lm_weights.hdf5").read_bytes()
MODEL_ZIP = zip_of({"options.json": OPTIONS, "model.hdf5": WEIGHTS})  # an NLPL-style archive


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def leaf_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir()) if path.parent.exists() else []


def cached_path(url: str) -> Path:
    return download.local_files({"archive": url})["archive"]


# -- a file changed between two tries ----------------------------------------------------------------------


@pytest.mark.parametrize("validators", [{"etag"}, {"last-modified"}], ids=["etag", "last-modified"])
def test_a_file_changed_between_tries_is_fetched_whole_not_spliced(server, cache, validators):
    server.validators = validators
    server.files["m.zip"], server.after_cut["m.zip"] = OLD, NEW
    server.cut_once.add("m.zip")
    old_validator = next(iter(server.validator_headers(OLD).values()))
    path = resolve_model_source(server.url("m.zip"), progress=False)
    assert path.read_bytes() == NEW  # not OLD's head and NEW's tail
    assert server.hits("m.zip") == [None, f"bytes={HALF}-"]  # it asked for the rest of the file it had...
    assert server.headers("m.zip", "If-Range") == [None, old_validator]  # ...only if still the same
    assert leaf_files(path) == [".m.zip.lock", "m.zip", "m.zip.sha256"]
    assert resolve_model_source(server.url("m.zip")) == path  # and the record is of NEW


def test_a_range_of_another_file_from_a_server_ignoring_if_range_is_dropped(server, cache):
    server.if_range = False  # it sends the range asked for of whatever it holds now, with its new ETag
    server.files["m.zip"], server.after_cut["m.zip"] = OLD, NEW
    server.cut_once.add("m.zip")
    assert resolve_model_source(server.url("m.zip"), progress=False).read_bytes() == NEW
    assert server.hits("m.zip") == [None, f"bytes={HALF}-", None]  # the 206 of NEW dropped, NEW fetched whole


def test_without_a_validator_a_broken_download_is_fetched_whole(server, cache):
    server.validators = set()  # nothing proves the bytes after a break are of the same file
    server.files["m.zip"], server.after_cut["m.zip"] = OLD, NEW
    server.cut_once.add("m.zip")
    assert resolve_model_source(server.url("m.zip"), progress=False).read_bytes() == NEW
    assert server.hits("m.zip") == [None, None]


def test_a_part_without_its_validator_is_fetched_whole(server, cache):
    server.files["m.zip"] = NEW
    part = cached_path(server.url("m.zip")).with_name("m.zip.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(OLD[:HALF])  # left by another program, or by 0.1 (which kept no validator)
    assert resolve_model_source(server.url("m.zip"), progress=False).read_bytes() == NEW
    assert server.hits("m.zip") == [None] and not part.exists()


# -- bodies whose length cannot be trusted ------------------------------------------------------------------


def test_a_body_of_no_length_cut_short_is_fetched_again(server, cache):
    server.files["m.zip"] = NEW
    server.no_length.add("m.zip")
    server.cut_once.add("m.zip")
    path = resolve_model_source(server.url("m.zip"), progress=False)
    assert path.read_bytes() == NEW and server.hits("m.zip") == [None, None]
    assert path.with_name("m.zip.sha256").read_text().split() == [sha256(NEW), "m.zip"]


def test_a_body_of_no_length_always_cut_is_refused_and_nothing_is_cached(server, cache):
    url = server.url("m.zip")
    server.files["m.zip"] = NEW
    server.no_length.add("m.zip")
    server.cut_always.add("m.zip")
    with pytest.raises(DownloadError, match="is not a readable zip archive") as refused:
        resolve_model_source(url, progress=False)
    assert str(refused.value).startswith(f"{url}: ") and "no stated length" in str(refused.value)
    assert leaf_files(cached_path(url)) == [".m.zip.lock"]
    assert len(server.hits("m.zip")) == 1 + download.RETRIES


def test_a_chunked_body_cut_short_is_not_cached_as_whole(server, cache):
    server.files["m.zip"] = NEW
    server.chunked.add("m.zip")
    server.cut_once.add("m.zip")
    assert resolve_model_source(server.url("m.zip"), progress=False).read_bytes() == NEW
    first, second = server.hits("m.zip")
    assert first is None and str(second).startswith("bytes=")  # resumed, the validator matching


def test_a_body_as_short_as_a_wrong_announced_length_is_refused_once(server, cache):
    url = server.url("m.zip")
    server.files["m.zip"] = NEW[:HALF]  # the server announces and sends half the file
    with pytest.raises(DownloadError, match="is not a readable zip archive") as refused:
        resolve_model_source(url, progress=False)
    assert str(refused.value).startswith(f"{url}: ") and "nothing was cached" in str(refused.value)
    assert leaf_files(cached_path(url)) == [".m.zip.lock"] and server.hits("m.zip") == [None]  # not retried


def test_an_html_page_sent_as_binary_is_refused(server, cache):
    url = server.url("m.zip")
    server.files["m.zip"] = b"\n  <!DOCTYPE html><html><body>Sign in to download</body></html>"
    with pytest.raises(DownloadError, match=r"m\.zip: the server sent an HTML page"):
        resolve_model_source(url, progress=False)
    assert leaf_files(cached_path(url)) == [".m.zip.lock"] and server.hits("m.zip") == [None]


def test_weights_and_options_that_do_not_read_are_refused(server, cache):
    server.files["a/options.json"], server.files["a/lm_weights.hdf5"] = OPTIONS, WEIGHTS[: len(WEIGHTS) // 2]
    with pytest.raises(DownloadError, match=r"a/lm_weights\.hdf5: the file sent is not a readable HDF5 file"):
        resolve_model_source(server.url("a/lm_weights.hdf5"), progress=False)
    server.files["b/options.json"], server.files["b/lm_weights.hdf5"] = b"[1, 2]", WEIGHTS
    with pytest.raises(DownloadError, match=r"b/options\.json: .*not a readable JSON object .*a JSON list"):
        resolve_model_source(server.url("b/lm_weights.hdf5"), progress=False)


def test_a_catalog_digest_vouches_for_a_body_of_no_length(server, cache, use_catalog):
    data = b"bytes no format check would pass, which the catalog's digest vouches for"
    server.files["m.bin"] = data
    server.no_length.add("m.bin")
    entry = {"name": "test/digest", "urls": {"archive": server.url("m.bin")}, "sha256": {"archive": sha256(data)}}
    use_catalog([entry])
    assert resolve_model_source("test/digest", progress=False).read_bytes() == data
    server.files["n.bin"] = data  # no digest: checked as what it claims, and it claims nothing
    server.no_length.add("n.bin")
    with pytest.raises(DownloadError, match=r"n\.bin: the body, of no stated length, is none of a zip archive"):
        resolve_model_source(server.url("n.bin"), progress=False)


# -- records missing, empty or unreadable --------------------------------------------------------------------


def damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # in the member's data: its CRC-32 no longer matches
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("record", [None, "", "not a digest\n"], ids=["deleted", "empty", "garbage"])
def test_a_missing_or_unreadable_record_does_not_make_damaged_bytes_good(server, cache, record):
    url = server.url("m.zip")
    server.files["m.zip"] = NEW
    path = resolve_model_source(url, progress=False)
    digest = path.with_name("m.zip.sha256")
    digest.unlink() if record is None else digest.write_text(record)
    damage(path)
    with pytest.raises(DownloadError) as refused:
        resolve_model_source(url)
    message = str(refused.value)
    assert message.startswith(f"{path} (from {url}) has no readable digest record (m.zip.sha256)")
    assert "Bad CRC-32" in message and f"remove {path} to fetch it again" in message
    assert f"spacy elmo download {url}" in message
    assert (digest.read_text() if digest.exists() else None) == record  # no record of the damage
    path.unlink()
    assert resolve_model_source(url, progress=False).read_bytes() == NEW  # as the message says


@pytest.mark.parametrize("record", [None, "", "not a digest\n"], ids=["deleted", "empty", "garbage"])
def test_a_missing_or_unreadable_record_beside_good_bytes_is_written_again(server, cache, record):
    server.files["m.zip"] = NEW
    path = resolve_model_source(server.url("m.zip"), progress=False)
    digest = path.with_name("m.zip.sha256")
    digest.unlink() if record is None else digest.write_text(record)
    assert resolve_model_source(server.url("m.zip")) == path
    assert digest.read_text().split() == [sha256(NEW), "m.zip"] and server.hits("m.zip") == [None]


# -- cache keys -----------------------------------------------------------------------------------------------


def test_a_query_or_a_fragment_keeps_the_suffix_and_the_model_loads(server, cache):
    server.files["m/model.zip"] = MODEL_ZIP
    server.files["e/lm_weights.hdf5"], server.files["e/options.json"] = WEIGHTS, OPTIONS
    reference = load_model(ELMO_FIXTURE / "lm_weights.hdf5").sha256
    one, other = (resolve_model_source(server.url(f"m/model.zip?token={t}"), progress=False) for t in (1, 2))
    assert one.name == other.name == "model.zip" and one != other  # two queries, two files
    assert resolve_model_source(server.url("m/model.zip#part"), progress=False).name == "model.zip"
    assert load_model(server.url("m/model.zip?token=1")).sha256 == reference
    assert load_model(server.url("e/lm_weights.hdf5?x=1#y")).sha256 == reference
    assert server.hits("m/model.zip?token=1") == [None] and server.hits("m/model.zip") == [None]  # no fragment


@pytest.mark.parametrize(
    "path",
    ["m" * 4996 + ".zip", "m" * 296 + ".zip", "/".join(["f" * 40] * 100) + "/m.zip", "a/" + "é" * 200 + ".zip"],
    ids=["5000-character-name", "300-character-name", "4000-character-path", "non-ascii-name"],
)
def test_long_names_are_shortened_keeping_the_suffix(server, cache, path):
    server.files[path] = NEW
    cached = resolve_model_source(server.url(path), progress=False)
    assert cached.read_bytes() == NEW and cached.suffix == ".zip" and cached.is_relative_to(cache)
    relative = cached.relative_to(cache)
    assert all(len(part.encode()) <= 100 for part in relative.parts) and len(str(relative)) < 400


def test_a_name_too_long_for_a_path_is_passed_on_not_a_traceback(cache):
    assert resolve_model_source("m" * 5000) == Path("m" * 5000)  # the loader then says it does not exist


def test_a_file_and_a_folder_of_the_same_name_are_both_cached(server, cache):
    server.files["m.zip"], server.files["m.zip/m.zip"] = OLD, NEW
    outer = resolve_model_source(server.url("m.zip"), progress=False)
    inner = resolve_model_source(server.url("m.zip/m.zip"), progress=False)
    assert outer.read_bytes() == OLD and inner.read_bytes() == NEW
    assert resolve_model_source(server.url("m.zip")).read_bytes() == OLD  # each still its own


def test_dot_segments_are_resolved_and_never_leave_the_cache(server, cache):
    server.files["m.zip"], server.files["a/m.zip"] = OLD, NEW
    climbing = resolve_model_source(server.url("a/../../m.zip"), progress=False)
    assert climbing == resolve_model_source(server.url("m.zip")) and climbing.read_bytes() == OLD
    assert resolve_model_source(server.url("a/m.zip"), progress=False).read_bytes() == NEW  # not the same key
    assert server.hits("m.zip") == [None] and climbing.is_relative_to(cache)
    for escaped in ("%2E%2E/%2e%2E/m.zip", "./a/.././m.zip"):
        assert resolve_model_source(server.url(escaped)) == climbing


def test_credentials_are_sent_but_never_stored_or_printed(server, cache, capfd):
    server.files["private/m.zip"] = NEW
    port = server.httpd.server_port
    url = f"http://alice:s3cret-pw@127.0.0.1:{port}/private/m.zip"
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    pooch.get_logger().addHandler(handler)
    try:
        path = resolve_model_source(url, progress=True)  # a progress line, and pooch's log line
    finally:
        pooch.get_logger().removeHandler(handler)
    assert any(f"127.0.0.1:{port}/private/m.zip" in line for line in logged)
    expected = "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()
    assert server.headers("private/m.zip", "Authorization") == [expected]
    with pytest.raises(DownloadError) as missing:
        resolve_model_source(f"http://alice:s3cret-pw@127.0.0.1:{port}/private/gone.zip", progress=False)
    printed = capfd.readouterr()
    assert f"http://127.0.0.1:{port}/private/gone.zip: HTTP 404" in str(missing.value)
    stored = [str(p) for p in cache.rglob("*")] + [p.read_text() for p in cache.rglob("*.sha256")]
    for text in (printed.out, printed.err, str(missing.value), *logged, *stored):
        assert "s3cret" not in text and "alice" not in text
    assert path.read_bytes() == NEW and "m.zip" in printed.err  # the progress line was there


def test_distinct_urls_get_distinct_places_none_inside_another():
    root = Path("/cache")
    urls = [
        "http://h/m.zip",
        "http://h/m.zip/m.zip",
        "http://h/m.zip?a=1",
        "http://h/m.zip?a=2",
        "https://h/m.zip",
        "http://h:8080/m.zip",
        "http://h/a/m.zip",
        "http://h/a%2Fm.zip",
        "http://h/a_m.zip",
        "http://h/m%40.zip",
        "http://h/m_.zip",
        "http://h/",
        "http://h/index",
    ]
    paths = [keys.cache_path(url, root) for url in urls]
    assert len(set(paths)) == len(paths)
    for path in paths:
        assert not any(other != path and other.is_relative_to(path) for other in paths)
    assert keys.cache_path("HTTP://User:Pw@H:80/a/./b/../../m.zip#f", root) == keys.cache_path("http://h/m.zip", root)
    assert keys.shown_url("https://u:p@H.example:443/x/%7e/%2f/../y?q=%c3") == "https://h.example/x/~/y?q=%C3"


SEGMENT = st.sampled_from(["", ".", "..", "%2E%2E", "m.zip", "M.ZIP", "a", "@", "%40", "a b", "é", "x" * 160])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(SEGMENT, min_size=1, max_size=5), min_size=2, max_size=6), st.sampled_from(["", "?q", "?r"]))
def test_no_two_normalised_urls_share_a_place_and_none_is_inside_another(segment_lists, query):
    root = Path("/cache")
    places: dict[Path, str] = {}
    for segments in segment_lists:
        url = "http://h/" + "/".join(segments) + query
        path = keys.cache_path(url, root)
        assert path.is_relative_to(root / "http" / "h")
        assert places.setdefault(path, keys.shown_url(url)) == keys.shown_url(url)
    for path in places:
        assert not any(other != path and other.is_relative_to(path) for other in places)


def test_a_cache_setting_naming_a_file_is_refused_naming_it(server, cache, tmp_path, monkeypatch):
    server.files["m.zip"] = NEW
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("")
    monkeypatch.setenv(download.CACHE_ENV, str(a_file))
    with pytest.raises(DownloadError, match=rf"SPACY_ELMO_CACHE is {re.escape(str(a_file))}, which is a file"):
        resolve_model_source(server.url("m.zip"), progress=False)
    monkeypatch.setenv(download.CACHE_ENV, str(a_file / "below"))
    with pytest.raises(
        DownloadError, match=rf"cannot make the cache folder {re.escape(str(a_file))}/below/.*SPACY_ELMO_CACHE"
    ):
        resolve_model_source(server.url("m.zip"), progress=False)
    with pytest.raises(DownloadError, match=rf"the cache folder given \(--cache\) is {re.escape(str(a_file))}"):
        download.download_url(server.url("m.zip"), cache=a_file)


# -- options beside a weights file; the shipped model without a catalog ----------------------------------


def test_a_bilm_tf_weights_file_finds_the_options_json_beside_it(server, cache):
    server.files["m/lm_weights.hdf5"], server.files["m/options.json"] = WEIGHTS, OPTIONS
    folder = resolve_model_source(server.url("m/lm_weights.hdf5"), progress=False)
    assert (folder / "options.json").read_bytes() == OPTIONS and (folder / "lm_weights.hdf5").read_bytes() == WEIGHTS
    assert server.hits("m/lm_options.json") == [None] and server.hits("m/options.json") == [None]  # 404, then
    assert load_model(server.url("m/lm_weights.hdf5")).sha256 == load_model(ELMO_FIXTURE / "lm_weights.hdf5").sha256
    server.files["n/lm_weights.hdf5"] = WEIGHTS
    with pytest.raises(DownloadError, match=r"n/lm_weights\.hdf5: no options found beside it \(.*n/lm_options\.json"):
        resolve_model_source(server.url("n/lm_weights.hdf5"), progress=False)
    assert not server.hits("n/lm_weights.hdf5")  # the weights are not fetched without their options


def test_an_unreadable_catalog_does_not_block_the_shipped_model(tmp_path, cache, monkeypatch):
    broken = tmp_path / "catalog.json"
    broken.write_text("{ not json")
    monkeypatch.setenv("SPACY_ELMO_CATALOG", str(broken))
    assert resolve_model_source("en_elmo_small") == Path("en_elmo_small")
    assert resolve_model("en_elmo_small").kind == "native"
    with pytest.raises(ValueError, match=r"catalog\.json \(SPACY_ELMO_CATALOG, or the shipped catalog\)"):
        resolve_model_source("efml/ru")  # a catalog name still needs it, and says which file is broken
    unreadable = tmp_path / "unreadable.json"
    unreadable.mkdir()  # reading it is an OSError
    monkeypatch.setenv("SPACY_ELMO_CATALOG", str(unreadable))
    assert resolve_model("en_elmo_small").kind == "native"
