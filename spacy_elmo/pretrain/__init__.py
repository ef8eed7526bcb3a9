"""Pretraining a biLM language model: `load_config` reads a config, `pretrain` runs it (as `spacy elmo
pretrain` does)."""

from .build import pretrain
from .config import load_config

__all__ = ["load_config", "pretrain"]
