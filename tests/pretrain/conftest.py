"""Fixtures for the pretraining tests: the committed Gutenberg sample and one tiny trained model."""

from pathlib import Path

import pytest

from pretrain_support import tiny_config
from spacy_elmo.pretrain.train import TrainResult, pretrain


@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus-cache")


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory, corpus_cache) -> TrainResult:
    """The tiny config trained for 120 steps, evaluated on the dev sample at steps 0 and 120."""
    out = tmp_path_factory.mktemp("tiny-run")
    config = tiny_config(
        corpus_cache, **{"training.max_steps": 120, "training.eval_every": 120, "training.checkpoint_every": 60}
    )
    return pretrain(config, out, log=lambda message: None)
