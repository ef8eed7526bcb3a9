"""Shared fixtures: the bilm-tf/AllenNLP reference model and small random biLMs."""

import os
from pathlib import Path

import pytest
import torch

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.io.hdf5 import load_bilm_tf

# Tests use tiny models, for which one thread is fastest (and steadier on a shared 2-core machine); the
# suite runs one worker a CPU (run.sh: pytest-xdist), so the processes tests start get one thread too.
torch.set_num_threads(1)
os.environ["OMP_NUM_THREADS"] = "1"


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    return ELMO_FIXTURE


@pytest.fixture(scope="session")
def reference_bilm() -> BiLM:
    """The tiny real bilm-tf model of AllenNLP's test fixtures (read-only: do not train it)."""
    return load_bilm_tf(ELMO_FIXTURE / "options.json", ELMO_FIXTURE / "lm_weights.hdf5")


def random_bilm(seed: int = 0, **overrides) -> BiLM:
    """A small random biLM; overrides go to BiLMOptions."""
    kwargs = dict(
        filters=[(1, 8), (2, 8), (3, 16)],
        char_embedding_dim=4,
        n_highway=1,
        lstm_dim=24,
        projection_dim=8,
        n_layers=2,
    )
    kwargs.update(overrides)
    bilm = BiLM(BiLMOptions(**kwargs))
    bilm.reset_parameters(seed)
    bilm.eval()
    return bilm


@pytest.fixture(scope="session")
def make_bilm():
    """Factory fixture: make_bilm(seed=0, **option_overrides) -> a small random BiLM in eval mode."""
    return random_bilm
