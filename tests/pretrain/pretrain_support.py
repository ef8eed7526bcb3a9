"""Paths and config helpers shared by the pretraining tests."""

from pathlib import Path

from spacy_elmo.pretrain.config import load_config

FIXTURES = Path(__file__).parent.parent / "fixtures"
SAMPLE_TRAIN = FIXTURES / "pretrain" / "train.txt"
SAMPLE_DEV = FIXTURES / "pretrain" / "dev.txt"
ELMO_FIXTURE = FIXTURES / "elmo-fixture"
TINY_CONFIG = Path(__file__).parent.parent.parent / "spacy_elmo" / "configs" / "pretrain_tiny.cfg"


def tiny_config(cache_dir: Path, **overrides):
    """The shipped tiny config on the committed sample, one thread, quiet logging."""
    values: dict[str, object] = {
        "paths.train": str(SAMPLE_TRAIN),
        "paths.dev": str(SAMPLE_DEV),
        "corpus.cache_dir": str(cache_dir),
        "training.n_threads": 1,
        "training.log_every": 1000,
    }
    values.update(overrides)
    return load_config(TINY_CONFIG, values)
