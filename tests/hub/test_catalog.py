"""The shipped catalog: every entry well formed and cited; the names users will guess; tarballs and TF-Hub
modules, companion files (the aligned models' matrices); a catalog of one's own through SPACY_ELMO_CATALOG."""

import json
import re

import pytest

from spacy_elmo.hub.catalog import (
    CATALOG_FILE,
    COMPANION_ROLES,
    FORMATS,
    close_names,
    entries_for,
    entry_for_url,
    find_entry,
    load_catalog,
    looks_like_name,
)

CATALOG = load_catalog(CATALOG_FILE)


RAW = json.loads(CATALOG_FILE.read_text(encoding="utf-8"))
SPDX_OR_NOT_STATED = re.compile(r"not stated|[A-Za-z0-9.+-]+")
SIZE = re.compile(r"(about )?[0-9]+(\.[0-9]+)? [KMGT]B")


def test_every_entry_is_well_formed_and_cites_its_source():
    assert len(CATALOG) == len(RAW["models"]) >= 78
    for name, entry in CATALOG.items():
        assert entry.name == name and re.fullmatch(r"[a-z]+/[a-z0-9.-]+", name), name
        assert entry.format in FORMATS and entry.language and entry.description, name
        model_roles = set(entry.urls) - set(COMPANION_ROLES)  # every role one the hub knows: all are fetched
        assert model_roles in ({"archive"}, {"options", "weights"}) and set(entry.companions) <= {"alignment"}, name
        assert all(re.fullmatch(r"https?://[^\s/]+/\S+", url) for url in entry.urls.values()), name
        assert entry.page.startswith("https://") and entry.licence, name
        assert set(entry.sha256) <= set(entry.urls), name
    weights = [url for entry in CATALOG.values() for role, url in entry.urls.items() if role != "options"]
    assert len(weights) == len(set(weights)), "two entries share a model file (only an options file may be shared)"


def test_every_entry_states_its_source_licence_evidence_and_size():
    """Complete fields: a source cited (its page and where the URLs are stated), primary or secondary, the
    licence as an SPDX id or "not stated" (with what the source says), format and language; a size wherever
    the source states one (null where none does, never left out)."""
    for key, source in RAW["sources"].items():
        assert source["page"].startswith("https://") and source["publisher"], key
        assert source["evidence"] in ("primary", "secondary"), key
        assert SPDX_OR_NOT_STATED.fullmatch(source["licence"]) and source["licence_note"], key
        assert source["urls_stated_in"] and all(isinstance(text, str) and text for text in source["urls_stated_in"])
        assert source["url_scheme"] in ("http", "https"), key
    for model in RAW["models"]:
        assert model["source"] in RAW["sources"], model["name"]
        assert "size" in model and (model["size"] is None or SIZE.fullmatch(model["size"])), model["name"]
        assert model["format"] in FORMATS and re.fullmatch(r"[a-z]{2,3}", model["language"]), model["name"]
    assert CATALOG["nlpl/212"].size_mb == 1500.0 and CATALOG["efml/ru"].size_mb is None


def test_each_url_has_the_scheme_its_source_gives():
    """http for the NLPL repository, as ELMoForManyLangs' README and the NLPL pages give it; https where the
    publisher gives https (AllenNLP's page, GitHub releases). The downloader falls back to the other."""
    for name, entry in CATALOG.items():
        for url in entry.urls.values():
            assert url.startswith(entry.source["url_scheme"] + "://"), (name, url)
        if "vectors.nlpl.eu" in " ".join(entry.urls.values()):
            assert entry.source["url_scheme"] == "http", name
    assert CATALOG["efml/ru"].urls["archive"] == "http://vectors.nlpl.eu/repository/11/170.zip"  # as the README


def test_the_licences_and_sources_the_publishers_state():
    assert {CATALOG[f"nlpl/{i}"].licence for i in (210, 211, 217, 218)} == {"CC-BY-4.0"}  # NorELMo's paper
    assert CATALOG["efml/ru"].licence == "not stated" and "MIT" in CATALOG["efml/ru"].source["licence_note"]
    assert CATALOG["tsystems/de"].licence == "BSD-2-Clause"
    allennlp = CATALOG["allennlp/original"].source
    assert allennlp["page"] == "https://allennlp.org/elmo" and allennlp["evidence"] == "primary"
    assert not any("tutorials/" in text or "flair" in text.lower() for text in allennlp["urls_stated_in"])
    secondary = sorted(name for name, entry in CATALOG.items() if entry.evidence == "secondary")
    assert secondary == [
        "embeddia/sl",
        "nlpl/195",
        "nlpl/196",
        "nlpl/199",
        "nlpl/210",
        "nlpl/211",
        "nlpl/212",
        "nlpl/217",
        "nlpl/218",
    ]
    assert {CATALOG[f"deeppavlov/ru-{m}"].licence for m in ("wiki", "news", "twitter")} == {"Apache-2.0"}
    assert (
        CATALOG["clinical/mimic-wiki"].licence == "MIT"
        and "LICENSE" in CATALOG["clinical/mimic-wiki"].source["licence_note"]
    )
    assert (
        CATALOG["embeddia/sl"].licence == "not stated" and "11356/1277" in CATALOG["embeddia/sl"].source["licence_note"]
    )


def test_the_portuguese_models_are_the_pair_allennlps_page_gives_since_2020_03_05():
    contributed = "https://allennlp.s3.amazonaws.com/models/elmo/contributed/pt/"
    assert CATALOG["allennlp/pt"].urls == {
        "options": contributed + "wikipedia/options.json",
        "weights": contributed + "wikipedia/elmo_pt_weights.hdf5",
    }
    assert CATALOG["allennlp/pt-brwac"].urls == {
        "options": contributed + "brwac/options.json",
        "weights": contributed + "brwac/elmo_pt_weights_dgx1.hdf5",
    }
    as_the_page_gives = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pt/brwac/"
    assert entry_for_url(as_the_page_gives + "elmo_pt_weights_dgx1.hdf5", CATALOG) is CATALOG["allennlp/pt-brwac"]


def test_the_aligned_multilingual_models_share_one_options_file():
    multilingual = [entry for name, entry in CATALOG.items() if name.startswith("allennlp/multilingual-")]
    assert sorted(entry.language for entry in multilingual) == ["de", "en", "es", "fr", "it", "pt", "sv"]
    shared = "https://allennlp.s3.amazonaws.com/models/multilingual_elmo/options262.json"
    assert {entry.urls["options"] for entry in multilingual} == {shared}
    for entry in multilingual:
        assert entry.urls["weights"].endswith(f"/multilingual_elmo/{entry.language}_weights.hdf5")
        assert entry.companions == {
            "alignment": f"{shared[: -len('options262.json')]}{entry.language}_best_mapping.pth"
        }
    cited = " ".join(multilingual[0].source["urls_stated_in"])  # as AllenNLP's configuration gives them
    assert "aligning_files: .../multilingual_elmo/<lang>_best_mapping.pth" in cited
    assert "first LSTM output of ELMo to English" in cited


def test_tarballs_and_tfhub_modules_are_archives_their_sources_state():
    """A tarball by its URL (EMBEDDIA's, the clinical model's, DeepPavlov's modules) or a TF-Hub module asked
    for compressed (tfhub.dev's `?tf-hub-format=compressed`): each URL as its source states it."""
    tarballs = sorted(name for name, entry in CATALOG.items() if entry.is_tarball)
    assert tarballs == [
        "clinical/mimic-wiki",
        "deeppavlov/ru-news",
        "deeppavlov/ru-twitter",
        "deeppavlov/ru-wiki",
        "embeddia/sl",
        "google/elmo-v1",
        "google/elmo-v2",
        "google/elmo-v3",
    ]
    for name in tarballs:
        entry = CATALOG[name]
        stated = " ".join(entry.source["urls_stated_in"])
        url = entry.urls["archive"]
        assert url.rsplit("/", 1)[1].split("?")[0] in stated, name
        assert entry.format == ("tfhub" if name.startswith(("deeppavlov/", "google/")) else "bilm-tf"), name
    embeddia = "https://www.clarin.si/repository/xmlui/bitstream/handle/11356/1277/slovenian-elmo.tar.gz"
    assert CATALOG["embeddia/sl"].urls["archive"] == embeddia and embeddia in " ".join(
        CATALOG["embeddia/sl"].source["urls_stated_in"]
    )
    clinical = "https://github.com/noc-lab/clinical_concept_extraction/releases/download/latest/elmo.tar.gz"
    assert CATALOG["clinical/mimic-wiki"].urls["archive"] == clinical
    assert CATALOG["deeppavlov/ru-wiki"].urls["archive"].startswith("http://files.deeppavlov.ai/deeppavlov_data/")
    for version in (1, 2, 3):
        entry = CATALOG[f"google/elmo-v{version}"]
        assert entry.urls["archive"] == f"https://tfhub.dev/google/elmo/{version}?tf-hub-format=compressed"
        assert "google/models/elmo/1.md, 2.md and 3.md" in " ".join(entry.source["urls_stated_in"])
    assert "?tf-hub-format=compressed to the TensorFlow model url" in " ".join(
        CATALOG["google/elmo-v3"].source["urls_stated_in"]
    )
    assert not CATALOG["allennlp/original"].is_tarball and not CATALOG["efml/ru"].is_tarball


def test_allennlps_english_models_are_named_as_users_guess():
    for name in ("allennlp/small", "allennlp/medium", "allennlp/original", "allennlp/original-5.5b"):
        entry = CATALOG[name]
        assert entry.language == "en" and entry.format == "bilm-tf" and "archive" not in entry.urls
        assert entry.urls["weights"].startswith("https://allennlp.s3.amazonaws.com/models/elmo/2x")
        assert entry.urls["weights"].endswith("_weights.hdf5") and entry.urls["options"].endswith("_options.json")
    assert CATALOG["allennlp/pubmed"].urls["weights"].endswith("_weights_PubMed_only.hdf5")


def test_the_44_elmoformanylangs_languages_with_their_nlpl_ids():
    efml = [entry for name, entry in CATALOG.items() if name.startswith("efml/")]
    assert len(efml) == 44 and {entry.format for entry in efml} == {"efml"}
    assert sorted(entry.nlpl_id for entry in efml) == list(range(136, 180))
    for entry in efml:
        assert entry.name == f"efml/{entry.language}"
        assert entry.urls == {"archive": f"http://vectors.nlpl.eu/repository/11/{entry.nlpl_id}.zip"}
    assert CATALOG["efml/ru"].nlpl_id == 170 and CATALOG["efml/nb"].nlpl_id == 165 and CATALOG["efml/nl"].nlpl_id == 164


def test_nlpl_models_are_named_by_their_repository_id():
    for name, entry in CATALOG.items():
        if name.startswith("nlpl/"):
            assert name == f"nlpl/{entry.nlpl_id}" and entry.urls["archive"].endswith(f"/{entry.nlpl_id}.zip")


def test_names_are_found_whatever_their_case_and_by_language():
    assert find_entry("EFML/RU", CATALOG) is CATALOG["efml/ru"] and find_entry("efml/xx", CATALOG) is None
    assert [e.name for e in entries_for("RU", CATALOG)] == [
        "deeppavlov/ru-news",
        "deeppavlov/ru-twitter",
        "deeppavlov/ru-wiki",
        "efml/ru",
        "nlpl/195",
        "nlpl/196",
        "nlpl/199",
        "nlpl/212",
    ]
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


def test_the_https_addresses_of_the_nlpl_repository_find_their_http_entries():
    from spacy_elmo.hub.catalog import canonical_url, entry_for_url

    given = "https://vectors.nlpl.eu/repository/11/170.zip"  # the repository serves https too
    assert canonical_url(given) == "http://vectors.nlpl.eu/repository/11/170.zip"  # as the README lists Russian
    assert entry_for_url(given).name == "efml/ru"
