"""A non-English pipeline: `spacy.blank("ru")` + `elmo` with an ELMoForManyLangs model + a `textcat`
listening to it, trained by `spacy train` on synthetic Russian data (no small public Russian
classification set is at hand): it learns, with ELMo as its only input."""

import random

import pytest
import spacy
from spacy.cli.init_config import fill_config
from spacy.cli.train import train
from spacy.tokens import DocBin
from spacy.training import Example
from spacy.util import load_config

from fixture_paths import FIXTURES

EFML_MODEL = FIXTURES / "elmoformanylangs" / "word_char"
POSITIVE = ["хорошо", "отлично", "прекрасно", "чудесно"]
NEGATIVE = ["плохо", "ужасно", "скверно", "отвратительно"]
FILLER = ["мы", "сегодня", "в", "городе", "было", "очень", "фильм", "книга", "это", "и", "там", "всё"]


def synthetic_docs(nlp: spacy.Language, n: int, seed: int) -> list:
    """Sentences of filler words with one word that decides the class."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        label = "POS" if i % 2 == 0 else "NEG"
        words = rng.choices(FILLER, k=6)
        words.insert(rng.randrange(7), rng.choice(POSITIVE if label == "POS" else NEGATIVE))
        doc = nlp.make_doc(" ".join(words) + " .")
        doc.cats = {"POS": float(label == "POS"), "NEG": float(label == "NEG")}
        docs.append(doc)
    return docs


@pytest.mark.slow
def test_a_russian_textcat_learns_from_an_efml_model(tmp_path):
    config = load_config(FIXTURES / "spacy" / "ner_textcat.cfg")
    config["nlp"]["lang"] = "ru"
    config["nlp"]["pipeline"] = ["elmo", "textcat"]
    del config["components"]["ner"]
    config["components"]["textcat"]["model"]["tok2vec"]["embed"] = None  # ELMo alone
    partial = tmp_path / "partial.cfg"
    config.to_disk(partial)
    filled = tmp_path / "config.cfg"
    fill_config(filled, partial)
    nlp = spacy.blank("ru")
    for split, n, seed in (("train", 160, 0), ("dev", 60, 1)):
        DocBin(docs=synthetic_docs(nlp, n, seed), store_user_data=True).to_disk(tmp_path / f"{split}.spacy")
    overrides = {
        "paths.train": str(tmp_path / "train.spacy"),
        "paths.dev": str(tmp_path / "dev.spacy"),
        "paths.elmo": str(EFML_MODEL),
        "training.max_epochs": 40,
        "training.optimizer.learn_rate.initial_rate": 0.02,
        "training.batcher.size.start": 80,
        "training.batcher.size.stop": 80,
        "training.max_steps": 0,
        "training.patience": 0,
        "training.eval_frequency": 200,
    }
    train(filled, tmp_path / "out", overrides=overrides)
    trained = spacy.load(tmp_path / "out" / "model-last")
    assert trained.lang == "ru" and trained.pipe_names == ["elmo", "textcat"]
    dev = [Example(trained.make_doc(d.text), d) for d in synthetic_docs(nlp, 60, 1)]
    score = trained.evaluate(dev)["cats_macro_f"]
    assert score > 0.8, score  # chance: 0.5
