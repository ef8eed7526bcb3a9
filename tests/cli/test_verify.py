"""`spacy elmo verify`: a model checked and described; a damaged one is exit status 1 naming the file."""

import json

import srsly
from typer.testing import CliRunner

from spacy_elmo.cli import elmo_cli
from spacy_elmo.io.native import DIGEST_KEY, MODEL_FILE
from spacy_elmo.io.resolve import shipped_model_path

runner = CliRunner()


def test_verify_the_shipped_model():
    done = runner.invoke(elmo_cli, ["verify", "en_elmo_small", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    recorded = srsly.msgpack_loads((shipped_model_path() / MODEL_FILE).read_bytes())[DIGEST_KEY]
    assert report["sha256"] == recorded and report["sha256_of"].startswith("recorded")
    assert report["layers"] == 3 and report["output_dim"] == 256 and report["vocab_size"] == 30000


def test_convert_records_a_digest_that_verify_checks(fixture_dir, tmp_path):
    converted = runner.invoke(elmo_cli, ["convert", str(fixture_dir), str(tmp_path / "native")])
    assert converted.exit_code == 0, converted.output
    # convert prints the digests a pin takes: the written model's and the source's, as verify prints them
    digest = {
        str(path): json.loads(runner.invoke(elmo_cli, ["verify", str(path), "--json"]).stdout)["sha256"]
        for path in (tmp_path / "native", fixture_dir)
    }
    assert f"model digest {digest[str(tmp_path / 'native')]} (as `verify` prints it" in converted.output
    assert f"from lm_weights.hdf5, model digest {digest[str(fixture_dir)]}" in converted.output
    done = runner.invoke(elmo_cli, ["verify", str(tmp_path / "native")])
    assert done.exit_code == 0 and "recorded in the file and checked" in done.output
    assert "3 x 32" in done.output and done.output.rstrip().endswith("ok")
    hdf5 = runner.invoke(elmo_cli, ["verify", str(fixture_dir)])
    assert hdf5.exit_code == 0 and "the model digest, over options.json, lm_weights.hdf5" in hdf5.output

    path = tmp_path / "native" / MODEL_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the largest array
    path.write_bytes(bytes(data))
    damaged = runner.invoke(elmo_cli, ["verify", str(tmp_path / "native")])
    assert damaged.exit_code == 1
    assert f"{path}: the model file is corrupt" in damaged.output


def test_info_of_a_published_model_says_where_it_comes_from(tmp_path, monkeypatch):
    from fixture_paths import ELMO_FIXTURE
    from http_files import serving, write_catalog
    from spacy_elmo.hub import download, transfer

    monkeypatch.delenv(download.OFFLINE_ENV, raising=False)
    monkeypatch.setenv(download.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(transfer, "TIMEOUT_S", 10.0)
    with serving() as server:
        for name in ("options.json", "lm_weights.hdf5"):
            server.files[f"m/{name}"] = (ELMO_FIXTURE / name).read_bytes()
        entry = {
            "name": "test/tiny",
            "language": "en",
            "format": "bilm-tf",
            "description": "the bilm-tf test model",
            "urls": {"options": server.url("m/options.json"), "weights": server.url("m/lm_weights.hdf5")},
        }
        monkeypatch.setenv("SPACY_ELMO_CATALOG", str(write_catalog(tmp_path / "catalog.json", [entry])))
        text = runner.invoke(elmo_cli, ["info", "test/tiny"])
        report = json.loads(runner.invoke(elmo_cli, ["info", "test/tiny", "--json"]).stdout)
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("name     test/tiny (en): the bilm-tf test model\nsource   ")
    assert "layers   3 x 32 (token layer + 2 LSTM layers)" in text.stdout and text.stdout.endswith("ok\n")
    assert report["published"]["name"] == "test/tiny" and report["published"]["language"] == "en"
    assert (
        report["sha256"]
        == json.loads(runner.invoke(elmo_cli, ["verify", str(ELMO_FIXTURE), "--json"]).stdout)["sha256"]
    )
    assert runner.invoke(elmo_cli, ["info", "--help"]).exit_code == 0


def test_info_offline_shows_what_the_catalog_knows_before_saying_what_is_missing(tmp_path, monkeypatch):
    entry = {
        "name": "test/big",
        "language": "en",
        "format": "bilm-tf",
        "description": "a model not in the cache",
        "urls": {"options": "http://127.0.0.1:9/m/options.json", "weights": "http://127.0.0.1:9/m/w.hdf5"},
        "size": "about 1.5 GB",
    }
    from http_files import write_catalog

    monkeypatch.setenv("SPACY_ELMO_CATALOG", str(write_catalog(tmp_path / "catalog.json", [entry])))
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    done = runner.invoke(elmo_cli, ["info", "test/big"])
    assert done.exit_code == 1
    assert done.stdout.startswith("name     test/big (en): a model not in the cache\n")
    assert "source   https://example.org/models; licence: CC-BY-4.0\n" in done.stdout
    assert "size     about 1.5 GB (bilm-tf)\n" in done.stdout
    assert "offline (SPACY_ELMO_OFFLINE)" in done.output and "is not in the cache" in done.output
    assert "aligned  " not in done.stdout
    entry["urls"]["alignment"] = "http://127.0.0.1:9/m/en_best_mapping.pth"  # an aligned multilingual model
    monkeypatch.setenv("SPACY_ELMO_CATALOG", str(write_catalog(tmp_path / "aligned.json", [entry])))
    done = runner.invoke(elmo_cli, ["info", "test/big"])
    assert 'aligned  into English\'s space by its matrix: alignment = "auto" (pipe), --alignment auto (embed)\n' in (
        done.stdout
    )
