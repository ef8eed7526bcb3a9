"""spacy-elmo: ELMo biLM embeddings as a first-class spaCy component.

Importing the package registers the `elmo` factory and the architectures and imports no torch, so a
pipeline served with the onnxruntime runtime runs where torch is not installed; the PyTorch classes
below are imported on first access.
"""

import importlib
from typing import Any

from .about import __version__

_TORCH_EXPORTS = {
    "BiLM": "spacy_elmo.bilm.bilm",
    "BiLMOutput": "spacy_elmo.bilm.bilm",
    "BiLMRunner": "spacy_elmo.bilm.runner",
    "load_model": "spacy_elmo.io.resolve",
}


def __getattr__(name: str) -> Any:
    if name in _TORCH_EXPORTS:
        return getattr(importlib.import_module(_TORCH_EXPORTS[name]), name)
    raise AttributeError(f"module 'spacy_elmo' has no attribute {name!r}")


from .bilm.options import BiLMOptions  # noqa: E402
from .errors import ModelFileError  # noqa: E402
from .extensions import set_vector_hooks  # noqa: E402
from .pipeline import Elmo, make_elmo  # noqa: E402  (registers the `elmo` factory and the architectures)

__all__ = [
    "__version__",
    "BiLM",
    "BiLMOutput",
    "BiLMOptions",
    "BiLMRunner",
    "Elmo",
    "load_model",
    "ModelFileError",
    "make_elmo",
    "set_vector_hooks",
]
