"""Fixtures for the pretraining tests: the committed Gutenberg sample, the tiny config on it, one tiny
trained model (one for the whole run), and a reader of metrics.jsonl."""

import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import pytest
from thinc.api import Config

from fixture_paths import FIXTURES, ROOT
from run_wide import run_wide
from spacy_elmo.pretrain.build import pretrain
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.loop import TrainResult

SAMPLE = FIXTURES / "pretrain"
TINY_CONFIG = ROOT / "spacy_elmo" / "configs" / "pretrain_tiny.cfg"


@pytest.fixture(scope="session")
def sample_train() -> Path:
    return SAMPLE / "train.txt"


@pytest.fixture(scope="session")
def sample_dev() -> Path:
    return SAMPLE / "dev.txt"


@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus-cache")


@pytest.fixture(scope="session")
def tiny_config(corpus_cache, sample_train, sample_dev) -> Callable[..., Config]:
    """tiny_config(**overrides, cache_dir=None): the shipped tiny config on the committed sample, one thread,
    quiet logging, the corpus cache shared by the session (or `cache_dir`)."""

    def make(cache_dir: Optional[Path] = None, **overrides) -> Config:
        values: dict[str, object] = {
            "paths.train": str(sample_train),
            "paths.dev": str(sample_dev),
            "corpus.cache_dir": str(cache_dir or corpus_cache),
            "training.n_threads": 1,
            "training.log_every": 1000,
        }
        values.update(overrides)
        return load_config(TINY_CONFIG, values)

    return make


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory, tiny_config) -> TrainResult:
    """The tiny config trained for 120 steps, evaluated on the dev sample at steps 0 and 120: once for the
    whole run (read-only: continue from it into another directory)."""
    with run_wide(tmp_path_factory, "tiny-run") as directory:
        out, result = directory / "run", directory / "result.pickle"
        if not result.exists():
            config = tiny_config(
                **{"training.max_steps": 120, "training.eval_every": 120, "training.checkpoint_every": 60}
            )
            result.write_bytes(pickle.dumps(pretrain(config, out, log=lambda message: None)))
        return pickle.loads(result.read_bytes())


@pytest.fixture(scope="session")
def read_metrics() -> Callable[[Path, str], list[dict]]:
    """read_metrics(path, kind): the records of one type ("train" or "eval") of a metrics.jsonl."""

    def read(path: Path, kind: str) -> list[dict]:
        return [r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if r["type"] == kind]

    return read
