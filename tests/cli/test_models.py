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
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert {"allennlp/original", "allennlp/original-5.5b", "efml/ru", "efml/zh", "nlpl/212"} <= set(names)
    done = runner.invoke(elmo_cli, ["models", "--lang", "ru", "--cache", str(tmp_path)])
    assert done.exit_code == 0, done.output
    rows = [line.split() for line in done.stdout.splitlines() if not line.startswith("    ")]
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
    assert listed.startswith("* test/ru ")
    done = runner.invoke(elmo_cli, ["download", "test/rus", "--cache", str(cache)])
    assert done.exit_code == 1 and "no model 'test/rus' in the catalog" in done.output and "test/ru" in done.output


def test_the_commands_have_help():
    for command in ("models", "download"):
        done = runner.invoke(elmo_cli, [command, "--help"])
        assert done.exit_code == 0 and "--cache" in done.output
