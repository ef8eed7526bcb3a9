"""A layout of the catalog: several models sharing one options file (AllenNLP's aligned multilingual ELMo:
options262.json for seven weight files). Each entry is a two-file model of its own: the shared options land
beside each weights file, and each loads from the local server as the same files on disk do."""

import pytest

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.hub.download import resolve_model_source
from spacy_elmo.io.resolve import load_model

pytestmark = pytest.mark.timeout(120)


def test_models_sharing_one_options_file_each_load(server, cache, use_catalog):
    server.files["multilingual_elmo/options262.json"] = (ELMO_FIXTURE / "options.json").read_bytes()
    weights = (ELMO_FIXTURE / "lm_weights.hdf5").read_bytes()
    options = server.url("multilingual_elmo/options262.json")
    entries = []
    for language in ("en", "es"):
        server.files[f"multilingual_elmo/{language}_weights.hdf5"] = weights
        urls = {"options": options, "weights": server.url(f"multilingual_elmo/{language}_weights.hdf5")}
        entries.append({"name": f"test/multilingual-{language}", "language": language, "urls": urls})
    use_catalog(entries)
    folders = [resolve_model_source(f"test/multilingual-{language}", progress=False) for language in ("en", "es")]
    assert folders[0] != folders[1]
    reference = load_model(ELMO_FIXTURE / "lm_weights.hdf5").sha256
    for folder, language in zip(folders, ("en", "es")):
        assert (folder / "options.json").read_bytes() == (ELMO_FIXTURE / "options.json").read_bytes()
        assert (folder / f"{language}_weights.hdf5").exists()
        assert load_model(folder).sha256 == reference
    assert server.hits("multilingual_elmo/options262.json") == [None, None]  # once for each model's folder
    assert load_model("test/multilingual-es").sha256 == reference  # by name, from the cache
