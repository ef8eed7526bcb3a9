"""Fixtures of the download tests: a local HTTP server, an empty cache, a test catalog."""

import types

import pooch.core
import pytest

from http_files import serving, write_catalog
from spacy_elmo.hub import download, transfer

TEST_TIMEOUT_S = 10.0


@pytest.fixture
def server():
    with serving() as files:
        yield files


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder, set as SPACY_ELMO_CACHE; online; short network timeouts, small chunks, and
    no wait between pooch's tries (its only use of `time`)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(download.CACHE_ENV, str(folder))
    monkeypatch.delenv(download.OFFLINE_ENV, raising=False)
    monkeypatch.setattr(transfer, "TIMEOUT_S", TEST_TIMEOUT_S)
    monkeypatch.setattr(transfer, "CHUNK_BYTES", 1024)  # a body cut short keeps what arrived in whole chunks
    monkeypatch.setattr(pooch.core, "time", types.SimpleNamespace(sleep=lambda seconds: None))
    return folder


@pytest.fixture
def use_catalog(tmp_path, monkeypatch):
    """use_catalog(models) -> a catalog file of these entries, set as SPACY_ELMO_CATALOG."""

    def write(models: list[dict]) -> None:
        path = write_catalog(tmp_path / f"catalog-{len(list(tmp_path.glob('catalog-*')))}.json", models)
        monkeypatch.setenv("SPACY_ELMO_CATALOG", str(path))

    return write
