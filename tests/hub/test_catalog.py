"""The shipped catalog: every entry well formed and cited; the names users will guess; a catalog of one's
own through SPACY_ELMO_CATALOG."""

import json
import re

import pytest

from spacy_elmo.hub.catalog import (
    CATALOG_FILE,
    FORMATS,
    close_names,
    entries_for,
    entry_for_url,
    find_entry,
    load_catalog,
    looks_like_name,
)

CATALOG = load_catalog(CATALOG_FILE)


def test_every_entry_is_well_formed_and_cites_its_source():
    assert len(CATALOG) == len(json.loads(CATALOG_FILE.read_text(encoding="utf-8"))["models"]) >= 50
    for name, entry in CATALOG.items():
        assert entry.name == name and re.fullmatch(r"[a-z]+/[a-z0-9.-]+", name), name
        assert entry.format in FORMATS and entry.language and entry.description, name
        assert set(entry.urls) in ({"archive"}, {"options", "weights"}), name
        # https only: the NLPL repository serves https too (its http addresses, as the ELMoForManyLangs
        # README gives them, are aliases)
        assert all(re.fullmatch(r"https://[^\s/]+/\S+", url) for url in entry.urls.values()), name
        assert entry.page.startswith("https://") and entry.licence, name
        assert set(entry.sha256) <= set(entry.urls), name
    urls = [url for entry in CATALOG.values() for url in entry.urls.values()]
    assert len(urls) == len(set(urls)), "two entries share a URL"


def test_allennlps_english_models_are_named_as_users_guess():
    for name in ("allennlp/small", "allennlp/medium", "allennlp/original", "allennlp/original-5.5b"):
        entry = CATALOG[name]
        assert entry.language == "en" and entry.format == "bilm-tf" and entry.is_pair
        assert entry.urls["weights"].startswith("https://allennlp.s3.amazonaws.com/models/elmo/2x")
        assert entry.urls["weights"].endswith("_weights.hdf5") and entry.urls["options"].endswith("_options.json")
    assert CATALOG["allennlp/pubmed"].urls["weights"].endswith("_weights_PubMed_only.hdf5")


def test_the_44_elmoformanylangs_languages_with_their_nlpl_ids():
    efml = [entry for name, entry in CATALOG.items() if name.startswith("efml/")]
    assert len(efml) == 44 and {entry.format for entry in efml} == {"efml"}
    assert sorted(entry.nlpl_id for entry in efml) == list(range(136, 180))
    for entry in efml:
        assert entry.name == f"efml/{entry.language}"
        assert entry.urls == {"archive": f"https://vectors.nlpl.eu/repository/11/{entry.nlpl_id}.zip"}
    assert CATALOG["efml/ru"].nlpl_id == 170 and CATALOG["efml/nb"].nlpl_id == 165 and CATALOG["efml/nl"].nlpl_id == 164


def test_nlpl_models_are_named_by_their_repository_id():
    for name, entry in CATALOG.items():
        if name.startswith("nlpl/"):
            assert name == f"nlpl/{entry.nlpl_id}" and entry.urls["archive"].endswith(f"/{entry.nlpl_id}.zip")


def test_names_are_found_whatever_their_case_and_by_language():
    assert find_entry("EFML/RU", CATALOG) is CATALOG["efml/ru"] and find_entry("efml/xx", CATALOG) is None
    assert [e.name for e in entries_for("RU", CATALOG)] == ["efml/ru", "nlpl/195", "nlpl/212"]
    assert looks_like_name("efml/xx", CATALOG) and not looks_like_name("models/efml", CATALOG)
    assert close_names("efml/rus", CATALOG)[0] == "efml/ru"
    pubmed = CATALOG["allennlp/pubmed"]
    assert entry_for_url(pubmed.urls["weights"], CATALOG) is pubmed
    older = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pubmed/"  # as old tutorials give it
    assert entry_for_url(older + "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5", CATALOG) is pubmed


def test_a_catalog_of_ones_own_replaces_the_shipped_one(tmp_path, monkeypatch):
    mine = tmp_path / "mirror.json"
    entry = {"name": "mirror/ru", "language": "ru", "format": "efml", "description": "a mirror"}
    source = {"page": "https://intranet.example/elmo", "licence": "as upstream"}
    mine.write_text(
        json.dumps({"models": [{**entry, "urls": {"archive": "https://intranet.example/170.zip"}, "source": source}]})
    )
    monkeypatch.setenv("SPACY_ELMO_CATALOG", str(mine))
    assert list(load_catalog()) == ["mirror/ru"] and load_catalog()["mirror/ru"].licence == "as upstream"
    mine.with_name("broken.json").write_text('{"models": [{"name": "x"}]}')
    monkeypatch.setenv("SPACY_ELMO_CATALOG", str(mine.with_name("broken.json")))
    with pytest.raises(ValueError, match=r"broken\.json \(SPACY_ELMO_CATALOG, or the shipped catalog\) is not a model"):
        load_catalog()


def test_the_http_addresses_the_elmoformanylangs_readme_gives_find_their_https_entries():
    from spacy_elmo.hub.catalog import canonical_url, entry_for_url

    given = "http://vectors.nlpl.eu/repository/11/170.zip"  # as the ELMoForManyLangs README lists Russian
    assert canonical_url(given) == "https://vectors.nlpl.eu/repository/11/170.zip"
    assert entry_for_url(given).name == "efml/ru"
