"""`spacy elmo models` and `spacy elmo download`: the catalog listed whole with a header (one size unit, the
licence), by language, format and licence, and as JSON; a model fetched ahead of time from a local HTTP
server into the cache given, an unknown name refused with the close ones."""

import importlib
import json

from typer.testing import CliRunner

from http_files import serving, write_catalog, zip_of
from spacy_elmo.cli import elmo_cli
from spacy_elmo.hub import download, transfer
from spacy_elmo.hub.catalog import CATALOG_FILE, entries_for, load_catalog

importlib.import_module("spacy_elmo.cli.models")  # registers the commands (as spacy_elmo.cli does)
runner = CliRunner()


def rows(output: str) -> list[list[str]]:
    """The table's rows (a header, then one per model) split into their columns, the description apart."""
    lines = [line for line in output.splitlines() if not line.startswith("    ")]
    return [line[2:].split(None, 6) for line in lines]


def test_models_lists_the_whole_catalog_with_a_header_one_size_unit_and_the_licence(tmp_path):
    done = runner.invoke(elmo_cli, ["models", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    header, *table = rows(done.stdout)
    assert header == ["name", "lang", "format", "params", "MB", "licence", "description"]
    assert len(table) == len(load_catalog(CATALOG_FILE)) and f"{len(table)} models; catalog:" in done.stderr
    by_name = {row[0]: row for row in table}
    assert by_name["allennlp/original"][1:6] == ["en", "bilm-tf", "93.6M", "-", "not"]  # "not stated"
    assert by_name["nlpl/212"][4] == "1500"  # "about 1.5 GB" in megabytes, as every size
    assert by_name["nlpl/210"][5] == "CC-BY-4.0" and by_name["tsystems/de"][5] == "BSD-2-Clause"
    assert {"allennlp/original-5.5b", "allennlp/pt-brwac", "efml/zh", "exawizards/ja", "plur/eu"} <= set(by_name)


def test_models_of_one_language_name_their_sources(tmp_path):
    done = runner.invoke(elmo_cli, ["models", "--lang", "ru", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    listed = [row[0] for row in rows(done.stdout)[1:]]
    assert listed == [entry.name for entry in entries_for("ru", load_catalog())] and len(listed) == 8
    assert rows(done.stdout)[1][:3] == ["deeppavlov/ru-news", "ru", "tfhub"]
    assert rows(done.stdout)[4][:3] == ["efml/ru", "ru", "efml"]
    assert "    source: https://github.com/HIT-SCIR/ELMoForManyLangs (primary)" in done.stdout
    assert "    source: https://rusvectores.org/ru/contextual (secondary)" in done.stdout
    done = runner.invoke(elmo_cli, ["models", "--lang", "tlh"])
    assert done.exit_code == 1 and "no model for language 'tlh' in the catalog; its languages: ar, bg" in done.output


def test_models_filter_by_format_and_licence(tmp_path):
    done = runner.invoke(elmo_cli, ["models", "--format", "efml", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    table = rows(done.stdout)[1:]
    assert len(table) == 44 and {row[2] for row in table} == {"efml"}
    done = runner.invoke(elmo_cli, ["models", "--licence", "cc-by-4.0", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert [row[0] for row in rows(done.stdout)[1:]] == ["nlpl/210", "nlpl/211", "nlpl/217", "nlpl/218"]
    done = runner.invoke(elmo_cli, ["models", "--licence", "not stated", "--format", "bilm-tf", "--lang", "de"])
    assert done.exit_code == 0, done.output
    assert [row[0] for row in rows(done.stdout)[1:]] == ["allennlp/multilingual-de"]
    done = runner.invoke(elmo_cli, ["models", "--format", "onnx"])
    assert done.exit_code == 1 and "no format 'onnx': the catalog's formats are bilm-tf, efml, tfhub" in done.output
    done = runner.invoke(elmo_cli, ["models", "--format", "tfhub", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert [row[0] for row in rows(done.stdout)[1:]] == [
        "deeppavlov/ru-news",
        "deeppavlov/ru-twitter",
        "deeppavlov/ru-wiki",
        "google/elmo-v1",
        "google/elmo-v2",
        "google/elmo-v3",
    ]
    done = runner.invoke(elmo_cli, ["models", "--licence", "GPL-3.0"])
    assert done.exit_code == 1 and "no model in the catalog with licence 'GPL-3.0'; its licences: " in done.output
    assert "Apache-2.0, BSD-2-Clause, CC-BY-4.0, MIT, not stated" in done.output


def test_models_json_gives_every_field_for_tools(tmp_path):
    done = runner.invoke(elmo_cli, ["models", "--json", "--format", "bilm-tf", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    records = json.loads(done.stdout)  # the count and catalog line go to stderr
    assert {record["format"] for record in records} == {"bilm-tf"} and len(records) >= 20
    by_name = {record["name"]: record for record in records}
    nlpl = by_name["nlpl/212"]
    assert nlpl["size"] == "about 1.5 GB" and nlpl["size_mb"] == 1500.0 and nlpl["nlpl_id"] == 212
    assert nlpl["urls"] == {"archive": "http://vectors.nlpl.eu/repository/20/212.zip"} and nlpl["cached"] is False
    assert nlpl["source"]["evidence"] == "secondary" and nlpl["source"]["page"].startswith("https://")
    german = by_name["tsystems/de"]
    assert german["licence"] == "BSD-2-Clause" and "LICENSE" in german["source"]["licence_note"]
    aligned = by_name["allennlp/multilingual-sv"]["urls"]  # a companion file among the URLs, by its role
    assert aligned["alignment"] == "https://allennlp.s3.amazonaws.com/models/multilingual_elmo/sv_best_mapping.pth"
    assert set(german) == {
        "name",
        "language",
        "format",
        "licence",
        "parameters",
        "size",
        "size_mb",
        "description",
        "urls",
        "nlpl_id",
        "source",
        "cached",
    }


def test_download_fetches_into_the_cache_and_models_marks_it(tmp_path, monkeypatch):
    monkeypatch.delenv("SPACY_ELMO_OFFLINE", raising=False)
    monkeypatch.setattr(transfer, "TIMEOUT_S", 10.0)
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
