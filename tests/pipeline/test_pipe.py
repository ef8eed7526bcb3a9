"""The `elmo` pipe on the bilm-tf fixture model: loading, layers, mixes, batching, bad input, storage."""

import json
import re
import shutil

import numpy
import pytest
import spacy
import srsly
from spacy.tokens import Doc

import spacy_elmo.bilm.bilm
import spacy_elmo.io.resolve
from fixture_paths import ELMO_FIXTURE
from spacy_elmo.bilm.batching import embed_windowed
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.extensions import ElmoNotSetError
from spacy_elmo.io.arrays import WeightsError
from spacy_elmo.io.native import bilm_to_bytes, save_native
from spacy_elmo.layers.bilm_model import runner_of
from spacy_elmo.pipeline import Elmo

N_LAYERS, WIDTH = 3, 32  # the fixture: 2 LSTM layers + the token layer; projection_dim 16


def elmo_nlp(**config) -> spacy.Language:
    nlp = spacy.blank("en")
    model = {"@architectures": "spacy-elmo.BiLM.v1", "path": str(ELMO_FIXTURE)}
    model.update(config.pop("model", {}))
    nlp.add_pipe("elmo", config={"model": model, **config})
    return nlp


@pytest.fixture(scope="module")
def nlp() -> spacy.Language:
    return elmo_nlp()


@pytest.fixture(scope="module")
def embedder(reference_bilm) -> BiLMRunner:
    return BiLMRunner(reference_bilm)


def distinct_texts(n: int) -> list[str]:
    return [f"Doc {i} : the {('cat', 'dog', 'bank', 'river')[i % 4]} number {i} sat ." for i in range(n)]


def test_add_pipe_works_without_initialize(nlp):
    doc = nlp("The biLM reads every sentence in both directions.")
    assert isinstance(nlp.get_pipe("elmo"), Elmo)
    assert doc._.elmo_layers.shape == (N_LAYERS, len(doc), WIDTH)
    assert doc._.elmo_layers.dtype == numpy.float32
    assert doc._.elmo.shape == (len(doc), WIDTH)
    assert doc[2]._.elmo.shape == (WIDTH,)
    assert doc[1:4]._.elmo.shape == (3, WIDTH)


def test_layers_equal_the_core_embedder(nlp, embedder):
    doc = nlp("A doc with no sentence boundaries is one window .")
    expected = embedder.embed_sentences([[t.text for t in doc]])[0]
    numpy.testing.assert_allclose(doc._.elmo_layers, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "mix,weights",
    [("average", [1 / 3, 1 / 3, 1 / 3]), ("top", [0.0, 0.0, 1.0]), ([0.5, 0.0, 2.0], [0.5, 0.0, 2.0])],
)
def test_default_mix_is_the_configured_mix(mix, weights):
    doc = elmo_nlp(default_mix=mix)("Mixing the layers of the biLM.")
    expected = numpy.tensordot(numpy.asarray(weights, dtype="float32"), doc._.elmo_layers, axes=(0, 0))
    numpy.testing.assert_allclose(doc._.elmo, expected, atol=1e-6)
    for token in doc:
        numpy.testing.assert_allclose(token._.elmo, expected[token.i], atol=1e-6)
    numpy.testing.assert_allclose(doc[2:4]._.elmo, expected[2:4], atol=1e-6)


def test_default_mix_of_wrong_length_is_a_clear_error():
    nlp = elmo_nlp(default_mix=[0.5, 0.5])
    with pytest.raises(ValueError, match="default_mix has 2 weights but the biLM has 3 layers"):
        nlp("two weights, three layers")


def test_sentences_are_embedded_separately(embedder):
    nlp = elmo_nlp()
    nlp.add_pipe("sentencizer", first=True)
    doc = nlp("This is the first sentence. And here is a second one!")
    sents = [[t.text for t in s] for s in doc.sents]
    assert len(sents) == 2
    expected = numpy.concatenate(embedder.embed_sentences(sents), axis=1)
    numpy.testing.assert_allclose(doc._.elmo_layers, expected, atol=1e-6, rtol=1e-5)


def test_doc_alone_equals_doc_in_a_batch_of_64(nlp):
    rng = numpy.random.default_rng(0)
    words = "the cat sat on a mat while dogs bark at night , and birds sing songs !".split()
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 300, size=64)]
    texts[10] = ""
    batched = list(nlp.pipe(texts, batch_size=64))
    for i in (0, 10, 17, 63):
        alone = nlp(texts[i])
        assert alone._.elmo_layers.shape == batched[i]._.elmo_layers.shape
        numpy.testing.assert_allclose(alone._.elmo_layers, batched[i]._.elmo_layers, atol=1e-6, rtol=0)


def test_edge_cases_empty_whitespace_long_unicode(nlp):
    # spaCy's tokenizer refuses lone surrogates (its StringStore is UTF-8), so text holding them is
    # escaped before tokenizing; the escaped form must embed like any other token.
    surrogate = "lone\udc80surrogate \ud83d".encode("utf-8", "backslashreplace").decode("utf-8")
    texts = [
        "",
        "   ",
        "spaces   between\n\n\ttokens \n",
        "x" * 300 + " and a long token",
        "emoji 😀👍🏽 CJK 漢字かな 한국어 combining e\u0301 a\u0308\u0301 zero\u200bwidth",
        surrogate,
    ]
    for text in texts:
        doc = nlp(text)
        layers = doc._.elmo_layers
        assert layers.shape == (N_LAYERS, len(doc), WIDTH), repr(text)
        assert numpy.isfinite(layers).all()
        for token in doc:
            if token.is_space:
                assert not layers[:, token.i].any(), "whitespace tokens get zero vectors"
            else:
                assert layers[:, token.i].any(), repr(token.text)


def test_long_doc_without_boundaries(nlp):
    words = ("word " * 20000).split()
    doc = nlp(Doc(nlp.vocab, words=[f"{w}{i % 97}" for i, w in enumerate(words)]))
    assert doc._.elmo_layers.shape == (N_LAYERS, 20000, WIDTH)
    assert doc._.elmo_layers[:, :, :].any(axis=(0, 2)).all()


def test_window_tokens_see_context_on_both_sides(embedder):
    """A token in the middle of a long doc gets the vectors of its own window (with context)."""
    nlp = elmo_nlp(model={"window_size": 12, "window_context": 3})
    words = [f"w{i}" for i in range(40)]
    doc = nlp(Doc(nlp.vocab, words=words))
    # stride 6: the 2nd window keeps [6, 12) and reads [3, 15)
    expected = embedder.embed_sentences([words[3:15]])[0]
    numpy.testing.assert_allclose(doc._.elmo_layers[:, 6:12], expected[:, 3:9], atol=1e-6, rtol=1e-5)


def test_default_model_path(monkeypatch, tmp_path, reference_bilm):
    save_native(reference_bilm, tmp_path / spacy_elmo.io.resolve.DEFAULT_MODEL)
    monkeypatch.setattr(spacy_elmo.io.resolve, "SHIPPED_MODELS_DIR", tmp_path)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    doc = nlp("the shipped model")
    reference = elmo_nlp()("the shipped model")
    numpy.testing.assert_allclose(doc._.elmo_layers, reference._.elmo_layers, atol=1e-6)


def test_missing_default_model_is_a_clear_error_before_the_first_doc(monkeypatch, tmp_path):
    monkeypatch.setattr(spacy_elmo.io.resolve, "SHIPPED_MODELS_DIR", tmp_path)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    with pytest.raises(FileNotFoundError, match="default biLM 'en_elmo_small' is not installed"):
        nlp("no model to embed this with")


def test_missing_path_is_a_clear_error_at_initialize(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.*does not exist"):
        elmo_nlp(model={"path": str(tmp_path / "nowhere")}).initialize()
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        FileNotFoundError, match=r"^spacy-elmo\.BiLM\.v1 model\.path: \S*empty: expected a native model"
    ):
        elmo_nlp(model={"path": str(tmp_path / "empty")}).initialize()


def test_options_that_do_not_match_the_weights(tmp_path):
    shutil.copy(ELMO_FIXTURE / "lm_weights.hdf5", tmp_path / "lm_weights.hdf5")
    options = json.loads((ELMO_FIXTURE / "options.json").read_text())
    options["lstm"]["projection_dim"] = 8
    (tmp_path / "options.json").write_text(json.dumps(options))
    nlp = elmo_nlp(model={"path": str(tmp_path)})
    with pytest.raises(WeightsError):
        nlp("mismatched weights")


@pytest.mark.parametrize("store", ["layers", "vectors", "both", "none"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_store_options(store, dtype):
    full = elmo_nlp()("What to keep on the doc .")
    doc = elmo_nlp(store=store, store_dtype=dtype)("What to keep on the doc .")
    tol = 1e-6 if dtype == "float32" else 1e-2
    if store in ("layers", "both"):
        assert doc._.elmo_layers.dtype == numpy.dtype(dtype)
        numpy.testing.assert_allclose(doc._.elmo_layers.astype("float32"), full._.elmo_layers, atol=tol, rtol=tol)
    else:
        assert doc._.elmo_layers is None
    if store == "none":
        for read in (lambda: doc._.elmo, lambda: doc[0]._.elmo, lambda: doc[1:3]._.elmo):
            with pytest.raises(
                ElmoNotSetError, match=r'_\.elmo: the `elmo` pipe was set to keep nothing .*store = "none"'
            ):
                read()
        assert getattr(doc._, "elmo", None) is None
    else:
        assert doc._.elmo.dtype == numpy.dtype(dtype)
        numpy.testing.assert_allclose(doc._.elmo.astype("float32"), full._.elmo, atol=tol, rtol=tol)
        numpy.testing.assert_allclose(doc[3]._.elmo.astype("float32"), full._.elmo[3], atol=tol, rtol=tol)


def test_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="store="):
        elmo_nlp(store="everything")
    with pytest.raises(ValueError, match="store_dtype="):
        elmo_nlp(store_dtype="int8")
    with pytest.raises(ValueError, match="default_mix="):
        elmo_nlp(default_mix="bottom")
    with pytest.raises(ValueError, match="window_context"):
        elmo_nlp(model={"window_size": 10, "window_context": 5})
    with pytest.raises(ValueError, match="cache_predictions"):
        elmo_nlp(cache_predictions="sometimes")


def test_vector_hooks():
    nlp = elmo_nlp(set_vector_hooks=True)
    doc = nlp("A cat sat . A dog ran .")
    numpy.testing.assert_allclose(doc.vector, doc._.elmo.mean(axis=0), atol=1e-6)
    numpy.testing.assert_allclose(doc[0:3].vector, doc._.elmo[0:3].mean(axis=0), atol=1e-6)
    numpy.testing.assert_allclose(doc[1].vector, doc._.elmo[1], atol=1e-6)
    a, b = doc._.elmo[1], doc._.elmo[5]
    cos = float(a @ b / numpy.linalg.norm(a) / numpy.linalg.norm(b))
    assert doc[1].similarity(doc[5]) == pytest.approx(cos, abs=1e-5)
    assert doc[0:3].similarity(doc[0:3]) == pytest.approx(1.0, abs=1e-6)
    assert doc.similarity(nlp("Something else entirely")) < 1.0
    assert doc.has_vector and doc[1].has_vector
    assert doc.vector_norm == pytest.approx(float(numpy.linalg.norm(doc.vector)), rel=1e-5)


def test_stateful_mode_carries_state():
    nlp = elmo_nlp(model={"stateful": True})
    stateless = elmo_nlp()("The same sentence twice .")
    first = nlp("The same sentence twice .")
    second = nlp("The same sentence twice .")
    numpy.testing.assert_allclose(first._.elmo_layers, stateless._.elmo_layers, atol=1e-6)
    assert not numpy.allclose(second._.elmo_layers[1:], first._.elmo_layers[1:], atol=1e-4)
    nlp.get_pipe("elmo").reset_state()
    numpy.testing.assert_allclose(nlp("The same sentence twice .")._.elmo_layers, first._.elmo_layers, atol=1e-6)


def test_doc_serialization_keeps_the_arrays(nlp):
    doc = nlp("Docs keep their ELMo through to_bytes .")
    restored = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    numpy.testing.assert_array_equal(restored._.elmo_layers, doc._.elmo_layers)
    numpy.testing.assert_array_equal(restored._.elmo, doc._.elmo)


def test_to_disk_and_spacy_load_round_trip(nlp, tmp_path):
    texts = ["Saved and loaded again .", "", "A second, longer document with more words in it ."]
    before = [d._.elmo_layers for d in nlp.pipe(texts)]
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    after = [d._.elmo_layers for d in loaded.pipe(texts)]
    for b, a in zip(before, after):
        numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    from_bytes = spacy.blank("en")
    # add_pipe checks its path (here the shipped default); from_bytes then replaces the weights
    from_bytes.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": ""}})
    from_bytes.from_bytes(nlp.to_bytes())
    # spaCy's documented way: the pipeline built from its config (path not checked), then its bytes
    from_config = spacy.util.get_lang_class("en").from_config(
        nlp.config.interpolate().merge({"components": {"elmo": {"model": {"path": str(tmp_path / "gone")}}}})
    )
    from_config.from_bytes(nlp.to_bytes())
    numpy.testing.assert_allclose(from_config(texts[0])._.elmo_layers, before[0], atol=1e-6, rtol=0)
    numpy.testing.assert_allclose(from_bytes(texts[0])._.elmo_layers, before[0], atol=1e-6, rtol=0)


def test_saved_pipeline_does_not_need_the_weights_path(tmp_path):
    model_dir = tmp_path / "weights"
    shutil.copytree(ELMO_FIXTURE, model_dir)
    nlp = elmo_nlp(model={"path": str(model_dir)})
    expected = nlp("weights travel with the pipeline")._.elmo_layers
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(model_dir)
    loaded = spacy.load(tmp_path / "pipeline")
    numpy.testing.assert_allclose(loaded("weights travel with the pipeline")._.elmo_layers, expected, atol=1e-6)


def test_saved_weights_hold_no_pickle(nlp, tmp_path):
    nlp("load the weights")
    nlp.to_disk(tmp_path / "pipeline")
    data = (tmp_path / "pipeline" / "elmo" / "model").read_bytes()
    assert b"spacy-elmo.bilm.v1" in data
    assert b"\x80\x02" not in data[:2] and b"PK\x03\x04" not in data, "no torch.save / pickle payloads"


def test_damaged_saved_weights_are_refused_naming_their_file(nlp, tmp_path):
    nlp("load the weights")
    nlp.to_disk(tmp_path / "pipeline")
    weights = tmp_path / "pipeline" / "elmo" / "model"
    data = bytearray(weights.read_bytes())
    arrays = srsly.msgpack_loads(bilm_to_bytes(runner_of(nlp.get_pipe("elmo").model).load()))["weights"]
    largest = max((array["data"] for array in arrays.values()), key=len)
    at = bytes(data).find(largest)
    assert at > 0
    data[at + len(largest) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    mend = r"\(a damaged copy or an edited file\); save the pipeline again \(nlp\.to_disk\) from a copy that loads"
    with pytest.raises(
        WeightsError, match=rf"^{re.escape(str(weights))}: the model file is corrupt: its contents.* {mend}"
    ):
        spacy.load(tmp_path / "pipeline")


def test_loading_keeps_the_settings_of_the_loading_config(nlp, tmp_path):
    nlp("load the weights")
    nlp.to_disk(tmp_path / "pipeline")
    model = {"token_budget": 256, "stateful": True, "n_threads": 1}
    loaded = spacy.load(tmp_path / "pipeline", config={"components": {"elmo": {"model": model}}})
    elmo = loaded.get_pipe("elmo")
    runner = runner_of(elmo.model)
    assert (runner.token_budget, runner.stateful, runner.n_threads) == (256, True, 1)
    assert elmo.stateful is True
    # and the settings the pipeline was saved with come back when nothing overrides them
    again = spacy.load(tmp_path / "pipeline").get_pipe("elmo")
    assert runner_of(again.model).stateful is False and runner_of(again.model).token_budget == 4096


@pytest.mark.parametrize("kind", ["bilm-tf directory", "hdf5 file", "native directory"])
def test_model_paths(kind, tmp_path, reference_bilm, nlp):
    if kind == "bilm-tf directory":
        path = ELMO_FIXTURE
    elif kind == "hdf5 file":
        path = ELMO_FIXTURE / "lm_weights.hdf5"
    else:
        path = save_native(reference_bilm, tmp_path / "native")
    doc = elmo_nlp(model={"path": str(path)})("Every kind of model path")
    numpy.testing.assert_allclose(doc._.elmo_layers, nlp("Every kind of model path")._.elmo_layers, atol=1e-6)


def test_embed_windows_a_long_sentence_as_the_pipe_does(embedder):
    """`embed` (through `batching.embed_windowed`) and the pipe cut a long text the same way."""
    nlp = elmo_nlp(model={"window_size": 12, "window_context": 3})
    words = [f"w{i}" for i in range(40)]
    doc = nlp(Doc(nlp.vocab, words=words))
    windowed = embed_windowed(BiLMRunner(embedder.load()), [words, words[:5]], 12, 3)
    numpy.testing.assert_allclose(windowed[0], doc._.elmo_layers, atol=1e-6, rtol=1e-5)
    assert windowed[0].shape == (N_LAYERS, 40, WIDTH)
    assert numpy.array_equal(windowed[1], BiLMRunner(embedder.load()).embed_sentences([words[:5]])[0])


# --- the layer cache at prediction (issue 48) ---------------------------------------------------------------


def test_prediction_after_initialize_keeps_no_layers(count_bilm_calls):
    """`nlp.initialize()` (the README's way to fail early on a bad path) leaves the training cache off: a
    service's memory does not grow with each distinct doc, and a text seen before takes as long again."""
    nlp = elmo_nlp()
    nlp.initialize()
    elmo = nlp.get_pipe("elmo")
    texts = distinct_texts(40)
    start = count_bilm_calls["n"]
    first = [doc._.elmo_layers for doc in nlp.pipe(texts, batch_size=8)]
    first_calls = count_bilm_calls["n"] - start
    assert first_calls > 0 and elmo.cache.n_bytes == 0
    again = [doc._.elmo_layers for doc in nlp.pipe(texts, batch_size=8)]
    assert count_bilm_calls["n"] - start == 2 * first_calls, "the second pass was answered from a cache"
    assert elmo.cache.n_bytes == 0
    for a, b in zip(first, again):
        numpy.testing.assert_array_equal(a, b)


def test_cache_predictions_caches_at_prediction_within_its_bound(count_bilm_calls):
    nlp = elmo_nlp(cache_predictions=True)
    elmo = nlp.get_pipe("elmo")
    texts = distinct_texts(20)
    first = [doc._.elmo_layers for doc in nlp.pipe(texts)]
    calls = count_bilm_calls["n"]
    assert calls > 0 and elmo.cache.n_bytes == sum(layers.nbytes for layers in first)
    again = [doc._.elmo_layers for doc in nlp.pipe(texts)]
    assert count_bilm_calls["n"] == calls, "asked for, the cache answers a text seen before"
    for a, b in zip(first, again):
        numpy.testing.assert_array_equal(a, b)
    # bounded whatever the stream: 1 MiB holds about 2,700 of the fixture's tokens, 400 docs are 4,800
    small = elmo_nlp(cache_predictions=True, cache_size_mb=1)
    for _ in small.pipe(distinct_texts(400), batch_size=64):
        assert small.get_pipe("elmo").cache.n_bytes <= 2**20
    assert small.get_pipe("elmo").cache.n_bytes > 2**20 - 2_000
    # carried LSTM state makes a doc's layers depend on the docs before it: nothing is cached then
    stateful = elmo_nlp(cache_predictions=True, model={"stateful": True})
    list(stateful.pipe(texts))
    assert stateful.get_pipe("elmo").cache.n_bytes == 0


def test_a_pipeline_saved_without_cache_predictions_loads_with_it_off(nlp, tmp_path):
    nlp("load the weights")
    nlp.to_disk(tmp_path / "pipeline")
    config = tmp_path / "pipeline" / "config.cfg"
    text = config.read_text(encoding="utf-8")
    assert "cache_predictions = false\n" in text
    config.write_text(text.replace("cache_predictions = false\n", ""), encoding="utf-8")
    loaded = spacy.load(tmp_path / "pipeline")
    elmo = loaded.get_pipe("elmo")
    assert elmo.cache_predictions is False
    texts = distinct_texts(4)
    for doc, again in zip(nlp.pipe(texts), loaded.pipe(texts)):
        numpy.testing.assert_allclose(again._.elmo_layers, doc._.elmo_layers, atol=1e-6)
    assert elmo.cache.n_bytes == 0
