"""Listeners in-process: broadcast during update, the frozen-biLM cache, fine-tuning, replace_listeners,
frozen + annotating components, and saving a pipeline with listeners."""

import random

import numpy
import pytest
import spacy
from spacy.tokens import DocBin
from spacy.training import Example
from spacy.util import fix_random_seed, load_config, load_model_from_config
from thinc.api import Adam

from fixture_paths import ELMO_FIXTURE, FIXTURES
from spacy_elmo.layers import bilm_parameters, find_elmo_listeners

CONFIG = FIXTURES / "spacy" / "ner_textcat.cfg"


def build_nlp(**overrides) -> spacy.Language:
    fix_random_seed(0)
    config = load_config(CONFIG, overrides={"paths.elmo": str(ELMO_FIXTURE), **overrides}, interpolate=False)
    return load_model_from_config(config, auto_fill=True, validate=True)


def examples(nlp, part: str, name: str, n: int):
    docs = list(DocBin().from_disk(FIXTURES / "spacy" / part / f"{name}.spacy").get_docs(nlp.vocab))[:n]
    return [Example(nlp.make_doc(doc.text), doc) for doc in docs]


def train(nlp, data, epochs: int, on_epoch=None):
    optimizer = nlp.initialize(lambda: data)
    rng = random.Random(0)
    for epoch in range(epochs):
        if on_epoch:
            on_epoch(epoch)
        rng.shuffle(data)
        # new Example objects each epoch, as spaCy's corpus reader makes
        batch_data = [Example(nlp.make_doc(eg.reference.text), eg.reference) for eg in data]
        for start in range(0, len(batch_data), 16):
            nlp.update(batch_data[start : start + 16], sgd=optimizer, losses={})
    return optimizer


def mix_params(nlp, component):
    mix = [n for n in nlp.get_pipe(component).model.walk() if n.name == "elmo-scalar-mix"][0]
    return mix.get_param("weights").copy(), mix.get_param("gamma").copy()


def test_listeners_are_found():
    nlp = build_nlp()
    elmo = nlp.get_pipe("elmo")
    assert elmo.listening_components == ["ner", "textcat"]
    assert len(elmo.listeners) == 2
    data = examples(nlp, "train", "wnut17", 2)
    elmo.initialize(lambda: data)  # loads the weights: the one place the listeners learn their dims from
    assert all(listener.get_dim("nO") == 32 and listener.get_dim("nL") == 3 for listener in elmo.listeners)


def test_frozen_training_runs_the_bilm_once_per_doc(count_bilm_calls):
    nlp = build_nlp()
    data = examples(nlp, "train", "wnut17", 24) + examples(nlp, "train", "mr", 24)
    before = bilm_parameters(nlp.get_pipe("elmo").model)
    counts = []
    train(nlp, data, epochs=3, on_epoch=lambda e: counts.append(count_bilm_calls["n"]))
    counts.append(count_bilm_calls["n"])
    assert counts[1] > counts[0], "the first epoch runs the biLM"
    assert counts[3] == counts[1], f"later epochs must not run the biLM: {counts}"
    assert nlp.get_pipe("elmo").cache.n_bytes > 0
    after = bilm_parameters(nlp.get_pipe("elmo").model)
    assert all(numpy.array_equal(before[k], after[k]) for k in before), "frozen biLM changed"
    for component in ("ner", "textcat"):
        weights, gamma = mix_params(nlp, component)
        assert numpy.abs(weights).max() > 1e-4 and abs(gamma[0] - 1.0) > 1e-4, (component, weights, gamma)


def test_fine_tuning_changes_the_bilm(count_bilm_calls):
    nlp = build_nlp(**{"components.elmo.model.fine_tune": True})
    data = examples(nlp, "train", "wnut17", 16) + examples(nlp, "train", "mr", 16)
    before = bilm_parameters(nlp.get_pipe("elmo").model)
    counts = []
    train(nlp, data, epochs=2, on_epoch=lambda e: counts.append(count_bilm_calls["n"]))
    counts.append(count_bilm_calls["n"])
    after = bilm_parameters(nlp.get_pipe("elmo").model)
    changed = [k for k in before if not numpy.array_equal(before[k], after[k])]
    assert len(changed) == len(before), f"unchanged: {set(before) - set(changed)}"
    assert counts[2] > counts[1], "fine-tuning runs the biLM every epoch"


@pytest.mark.parametrize("fine_tune", [False, True])
def test_listeners_let_go_of_the_batch_after_backprop(fine_tune):
    """As spacy-transformers' listener does: a batch's layers are not held until the next batch."""
    nlp = build_nlp(**{"components.elmo.model.fine_tune": fine_tune})
    data = examples(nlp, "train", "wnut17", 8) + examples(nlp, "train", "mr", 8)
    optimizer = nlp.initialize(lambda: data)
    listeners = nlp.get_pipe("elmo").listeners
    received = []
    for listener in listeners:
        receive = listener.receive
        listener.receive = lambda *args, _receive=receive: (received.append(args[0]), _receive(*args))[1]
    nlp.update(data, sgd=optimizer, losses={})
    assert len(received) == len(listeners)
    for listener in listeners:
        assert listener._outputs is None and listener._backprop is None and listener._batch_id is None


def test_replace_listeners_keeps_predictions(tmp_path):
    nlp = build_nlp()
    data = examples(nlp, "train", "wnut17", 24) + examples(nlp, "train", "mr", 16)
    train(nlp, data, epochs=2)
    texts = [eg.reference.text for eg in examples(nlp, "dev", "wnut17", 12)]
    ents = [[(e.start, e.end, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
    tok2vec = nlp.get_pipe("ner").model.get_ref("tok2vec")
    before = [a.copy() for a in tok2vec.predict(list(nlp.pipe(texts)))]
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    assert nlp.get_pipe("elmo").listening_components == ["textcat"]
    assert not find_elmo_listeners(nlp.get_pipe("ner").model)
    assert nlp.get_pipe_config("ner")["model"]["tok2vec"]["elmo"]["@architectures"] == "spacy-elmo.Elmo.v1"
    standalone = spacy.blank("en")
    standalone.add_pipe("ner", source=nlp)
    assert standalone.pipe_names == ["ner"]
    docs = list(standalone.pipe(texts))
    assert [[(e.start, e.end, e.label_) for e in d.ents] for d in docs] == ents
    after = standalone.get_pipe("ner").model.get_ref("tok2vec").predict([standalone.make_doc(t) for t in texts])
    for b, a in zip(before, after):
        numpy.testing.assert_allclose(a, b, atol=1e-5)
    standalone.to_disk(tmp_path / "ner-only")
    loaded = spacy.load(tmp_path / "ner-only")
    assert [[(e.start, e.end, e.label_) for e in d.ents] for d in loaded.pipe(texts)] == ents


def test_frozen_and_annotating_elmo(count_bilm_calls, tmp_path):
    nlp = build_nlp()
    data = examples(nlp, "train", "wnut17", 16) + examples(nlp, "train", "mr", 8)
    with nlp.select_pipes(disable=["elmo"]):
        optimizer = nlp.initialize(lambda: data)
    before = bilm_parameters(nlp.get_pipe("elmo").model)
    for _ in range(2):
        batch = [Example(nlp.make_doc(eg.reference.text), eg.reference) for eg in data]
        nlp.update(batch, sgd=optimizer, exclude=["elmo"], annotates=["elmo"])
    after = bilm_parameters(nlp.get_pipe("elmo").model)
    assert all(numpy.array_equal(before[k], after[k]) for k in before)
    weights, _ = mix_params(nlp, "ner")
    assert numpy.abs(weights).max() > 0
    batch = [Example(nlp.make_doc(eg.reference.text), eg.reference) for eg in data]
    with pytest.raises(ValueError, match="annotating_components"):
        nlp.update(batch, sgd=optimizer, exclude=["elmo"])


def test_pipeline_with_listeners_round_trips(tmp_path):
    nlp = build_nlp()
    data = examples(nlp, "train", "wnut17", 16) + examples(nlp, "train", "mr", 16)
    train(nlp, data, epochs=1)
    texts = ["Going to New York City tomorrow", "a wonderful film", "\n"]  # (TextCatReduce fails on empty docs)
    docs = list(nlp.pipe(texts))
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").listening_components == ["ner", "textcat"]
    for doc, again in zip(docs, loaded.pipe(texts)):
        numpy.testing.assert_allclose(again._.elmo_layers, doc._.elmo_layers, atol=1e-6)
        assert [(e.start, e.end, e.label_) for e in again.ents] == [(e.start, e.end, e.label_) for e in doc.ents]
        assert again.cats == pytest.approx(doc.cats, abs=1e-6)


def test_listener_warns_when_elmo_did_not_run():
    nlp = build_nlp()
    data = examples(nlp, "train", "wnut17", 8) + examples(nlp, "train", "mr", 8)
    nlp.initialize(lambda: data)
    with nlp.select_pipes(disable=["elmo"]):
        with pytest.warns(UserWarning, match="have no ELMo layers"):
            nlp("The elmo pipe is disabled")


def test_listener_width_is_checked():
    nlp = build_nlp(**{"components.ner.model.tok2vec.elmo.width": 64})
    with pytest.raises(ValueError, match="width=64 but the upstream 'elmo' biLM gives vectors of width 32"):
        nlp.get_pipe("elmo").initialize(lambda: examples(nlp, "train", "wnut17", 2))


TEXTCAT_ARCHITECTURES = {
    "spacy.TextCatReduce.v1": {
        "use_reduce_first": False,
        "use_reduce_last": True,
        "use_reduce_max": True,
        "use_reduce_mean": True,
    },
    "spacy.TextCatCNN.v2": {},
    "spacy.TextCatParametricAttention.v1": {},
    "spacy.TextCatEnsemble.v2": {
        "linear_model": {
            "@architectures": "spacy.TextCatBOW.v3",
            "exclusive_classes": True,
            "ngram_size": 1,
            "no_output_layer": False,
        }
    },
}


@pytest.mark.parametrize("architecture", sorted(TEXTCAT_ARCHITECTURES))
def test_elmo_tok2vec_in_every_textcat_architecture(architecture):
    nlp = build_nlp()
    nlp.remove_pipe("ner")
    cfg = nlp.config.interpolate()["components"]["textcat"]["model"]
    model = {"@architectures": architecture, "tok2vec": cfg["tok2vec"], **TEXTCAT_ARCHITECTURES[architecture]}
    if architecture not in ("spacy.TextCatEnsemble.v2", "spacy.TextCatParametricAttention.v1"):
        model["exclusive_classes"] = True
        model["nO"] = None
    elif architecture == "spacy.TextCatParametricAttention.v1":
        model["exclusive_classes"] = True
    nlp.remove_pipe("textcat")
    nlp.add_pipe("textcat", config={"model": model})
    assert nlp.get_pipe("elmo").listening_components == ["textcat"]
    data = examples(nlp, "train", "mr", 16)
    train(nlp, data, epochs=2)
    weights, _ = mix_params(nlp, "textcat")
    assert numpy.abs(weights).max() > 0
    doc = nlp("a wonderful , touching film")
    assert set(doc.cats) == {"POS", "NEG"}


def test_listeners_get_layers_whatever_store_says():
    nlp = build_nlp(**{"components.elmo.store": "vectors"})
    data = examples(nlp, "train", "wnut17", 8) + examples(nlp, "train", "mr", 8)
    nlp.initialize(lambda: data)
    doc = nlp("Layers stay on the doc for the listeners")
    assert doc._.elmo_layers is not None and doc._.elmo.shape == (len(doc), 32)
    plain = spacy.blank("en")
    plain.add_pipe(
        "elmo",
        config={"store": "vectors", "model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(ELMO_FIXTURE)}},
    )
    assert plain("No listeners here")._.elmo_layers is None


# --- when the frozen biLM's layer cache is read and filled (issue 48) ----------------------------------------


def fresh(nlp, data):
    """New Example objects with new docs, as spaCy's corpus reader makes each epoch and each evaluation."""
    return [Example(nlp.make_doc(eg.reference.text), eg.reference) for eg in data]


def evaluate(nlp, optimizer, dev):
    """As spaCy's training loop evaluates: under the optimizer's averages when it keeps them."""
    if optimizer.averages:
        with nlp.use_params(optimizer.averages):
            return nlp.evaluate(dev)
    return nlp.evaluate(dev)


@pytest.mark.parametrize("use_averages", [False, True])
def test_evaluation_in_training_reuses_the_cache_and_prediction_after_it_does_not(count_bilm_calls, use_averages):
    """The dev docs are the same at every evaluation of a training session (spacy train evaluates under the
    optimizer's averages only with use_averages = true, spaCy's default being false): embedded once. The
    evaluation ends the session: plain prediction after it neither reads nor fills the cache."""
    nlp = build_nlp()
    elmo = nlp.get_pipe("elmo")
    data = examples(nlp, "train", "wnut17", 8) + examples(nlp, "train", "mr", 8)
    dev = examples(nlp, "dev", "wnut17", 6) + examples(nlp, "dev", "mr", 6)
    optimizer = Adam(0.001, use_averages=use_averages)
    nlp.initialize(lambda: data, sgd=optimizer)
    assert elmo.cache.n_bytes == 0
    nlp.update(fresh(nlp, data), sgd=optimizer)
    train_bytes = elmo.cache.n_bytes
    assert train_bytes > 0, "training fills the cache"
    assert bool(optimizer.averages) == use_averages
    calls = count_bilm_calls["n"]
    evaluate(nlp, optimizer, fresh(nlp, dev))
    assert count_bilm_calls["n"] > calls and elmo.cache.n_bytes > train_bytes, "the first evaluation embeds"
    filled = elmo.cache.n_bytes
    calls = count_bilm_calls["n"]
    nlp.update(fresh(nlp, data), sgd=optimizer)
    scores = evaluate(nlp, optimizer, fresh(nlp, dev))
    assert count_bilm_calls["n"] == calls, "a training doc or a dev doc was embedded twice"
    assert elmo.cache.n_bytes == filled
    assert scores["ents_f"] is not None and scores["cats_macro_f"] is not None
    # the evaluation ended the session: a text seen in training is embedded again, a new one is not kept
    list(nlp.pipe([eg.reference.text for eg in dev]))
    assert count_bilm_calls["n"] > calls, "a dev doc was answered from the cache after the evaluation"
    list(nlp.pipe(["A text no one has seen before"]))
    assert elmo.cache.n_bytes == filled


def test_a_save_ends_the_training_session_and_keeps_the_cache(count_bilm_calls, tmp_path):
    """spacy train saves when it ends (model-last): predictions after a save leave the cache alone. Saving
    changes no weight, so the training docs' layers stay cached for the next update."""
    nlp = build_nlp()
    elmo = nlp.get_pipe("elmo")
    data = examples(nlp, "train", "wnut17", 8) + examples(nlp, "train", "mr", 8)
    optimizer = nlp.initialize(lambda: data)
    nlp.update(fresh(nlp, data), sgd=optimizer)
    filled = elmo.cache.n_bytes
    nlp.to_disk(tmp_path / "pipeline")
    list(nlp.pipe(["Going to New York City tomorrow", "a wonderful film"]))
    assert elmo.cache.n_bytes == filled
    calls = count_bilm_calls["n"]
    nlp.update(fresh(nlp, data), sgd=optimizer)
    assert count_bilm_calls["n"] == calls, "the training docs' layers were dropped by the save"
    # a new initialize (weights read again) empties it; so does loading weights
    nlp.initialize(lambda: data)
    assert elmo.cache.n_bytes == 0
    nlp.update(fresh(nlp, data), sgd=optimizer)
    assert elmo.cache.n_bytes == filled
    elmo.from_disk(tmp_path / "pipeline" / "elmo", exclude=["vocab"])
    assert elmo.cache.n_bytes == 0


def test_a_fine_tuned_bilm_caches_nothing():
    nlp = build_nlp(**{"components.elmo.model.fine_tune": True})
    data = examples(nlp, "train", "wnut17", 8) + examples(nlp, "train", "mr", 8)
    optimizer = nlp.initialize(lambda: data)
    nlp.update(fresh(nlp, data), sgd=optimizer)
    nlp.evaluate(fresh(nlp, data))
    assert nlp.get_pipe("elmo").cache.n_bytes == 0


def test_cache_predictions_caches_a_frozen_annotating_pipe(count_bilm_calls):
    """A frozen pipe in annotating_components is never updated: its training docs come back every epoch through
    prediction, which caches only when asked (cache_predictions)."""
    nlp = build_nlp(**{"components.elmo.cache_predictions": True})
    data = examples(nlp, "train", "wnut17", 8) + examples(nlp, "train", "mr", 8)
    with nlp.select_pipes(disable=["elmo"]):
        optimizer = nlp.initialize(lambda: data)
    counts = []
    for _ in range(2):
        counts.append(count_bilm_calls["n"])
        nlp.update(fresh(nlp, data), sgd=optimizer, exclude=["elmo"], annotates=["elmo"])
    counts.append(count_bilm_calls["n"])
    assert counts[1] > counts[0] and counts[2] == counts[1], f"the second epoch ran the biLM: {counts}"
