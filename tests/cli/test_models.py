"""`spacy elmo models` and `spacy elmo download`: the catalog listed (by language), a model fetched ahead of
time from a local HTTP server into the cache given, an unknown name refused with the close ones."""

import importlib

from typer.testing import CliRunner

from http_files import serving, write_catalog, zip_of
from spacy_elmo.cli import elmo_cli
from spacy_elmo.hub import download

importlib.import_module("spacy_elmo.cli.models")  # registers the commands (as spacy_elmo.cli does)
runner = CliRunner()


def test_models_lists_the_catalog_and_one_language(tmp_path):
    done = runner.invoke(elmo_cli, ["models", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    header, *lines = done.stdout.splitlines()
    assert header.split() == ["name", "lang", "format", "params", "download", "description"]
    names = [line.split()[0] for line in lines]
    original = next(line for line in lines if line.split()[0] == "allennlp/original").split()
    assert original[3:5] == ["93.6M", "-"]  # the parameters and the download's size, each in its own column
    assert {"allennlp/original", "allennlp/original-5.5b", "efml/ru", "efml/zh", "nlpl/212"} <= set(names)
    done = runner.invoke(elmo_cli, ["models", "--lang", "ru", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    rows = [line.split() for line in done.stdout.splitlines()[1:] if not line.startswith("    ")]
    assert [row[0] for row in rows] == ["efml/ru", "nlpl/195", "nlpl/212"]
    assert rows[0][:3] == ["efml/ru", "ru", "efml"]
    assert "source: https://github.com/HIT-SCIR/ELMoForManyLangs" in done.stdout
    done = runner.invoke(elmo_cli, ["models", "--lang", "tlh"])
    assert done.exit_code == 1 and "no model for language 'tlh' in the catalog; its languages: ar, bg" in done.output


def test_download_fetches_into_the_cache_and_models_marks_it(tmp_path, monkeypatch):
    monkeypatch.delenv("SPACY_ELMO_OFFLINE", raising=False)
    monkeypatch.setattr(download, "TIMEOUT_S", 10.0)
    cache = tmp_path / "my-cache"
    with serving() as server:
        archive = zip_of({"ru.txt": b"zip bytes"})  # a download with no digest must read as what it claims
        server.files["m/ru.zip"] = archive
        entry = {"name": "test/ru", "language": "ru", "format": "efml", "urls": {"archive": server.url("m/ru.zip")}}
        monkeypatch.setenv("SPACY_ELMO_CATALOG", str(write_catalog(tmp_path / "catalog.json", [entry])))
        done = runner.invoke(elmo_cli, ["download", "test/ru", "--cache", str(cache)])
    assert done.exit_code == 0, done.output
    path = done.stdout.strip()
    assert path.startswith(str(cache)) and open(path, "rb").read() == archive
    listed = runner.invoke(elmo_cli, ["models", "--cache", str(cache)]).stdout
    assert listed.splitlines()[1].startswith("* test/ru ")
    done = runner.invoke(elmo_cli, ["download", "test/rus", "--cache", str(cache)])
    assert done.exit_code == 1 and "no model 'test/rus' in the catalog" in done.output and "test/ru" in done.output


def test_the_commands_have_help():
    for command in ("models", "download"):
        done = runner.invoke(elmo_cli, [command, "--help"])
        assert done.exit_code == 0 and "--cache" in done.output


def test_download_offline_fetches_nothing_and_names_what_is_missing(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    with serving() as server:
        server.files["m/ru.zip"] = zip_of({"ru.txt": b"zip bytes"})
        entry = {"name": "test/ru", "language": "ru", "format": "efml", "urls": {"archive": server.url("m/ru.zip")}}
        monkeypatch.setenv("SPACY_ELMO_CATALOG", str(write_catalog(tmp_path / "catalog.json", [entry])))
        monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
        by_name = runner.invoke(elmo_cli, ["download", "test/ru", "--cache", str(cache)])
        by_url = runner.invoke(elmo_cli, ["download", server.url("m/other.zip"), "--cache", str(cache)])
        assert server.requests == []  # nothing was asked of the server
        monkeypatch.delenv("SPACY_ELMO_OFFLINE")
        fetched = runner.invoke(elmo_cli, ["download", "test/ru", "--cache", str(cache)])
        assert fetched.exit_code == 0, fetched.output
        monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
        asked = len(server.requests)
        again = runner.invoke(elmo_cli, ["download", "test/ru", "--cache", str(cache)])  # cached: checked only
        assert len(server.requests) == asked
    for done in (by_name, by_url):
        assert done.exit_code == 1
        assert "offline (SPACY_ELMO_OFFLINE)" in done.output and "is not in the cache" in done.output
        assert "spacy elmo download NAME_OR_URL) and copy the cache folder" in done.output
    assert again.exit_code == 0 and again.stdout.strip() == fetched.stdout.strip()


def test_a_host_out_of_reach_says_what_to_do_instead(tmp_path, monkeypatch):
    monkeypatch.delenv("SPACY_ELMO_OFFLINE", raising=False)
    monkeypatch.setattr(download, "RETRIES", 0)
    import socket

    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = runner.invoke(elmo_cli, ["download", f"http://127.0.0.1:{port}/m.zip", "--cache", str(tmp_path)])
    assert done.exit_code == 1
    assert f"if this machine cannot reach 127.0.0.1:{port}, fetch it where the network is reachable" in done.output
    assert "kept in" not in done.output  # nothing was received: no partial file is promised
