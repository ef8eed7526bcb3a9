"""spacy-elmo: ELMo biLM embeddings as a first-class spaCy component."""

from .about import __version__
from .bilm.bilm import BiLM, BiLMOutput
from .bilm.options import BiLMOptions
from .bilm.runner import BiLMRunner
from .io.hdf5 import load_bilm_tf, save_bilm_tf

__all__ = [
    "__version__",
    "BiLM",
    "BiLMOutput",
    "BiLMOptions",
    "BiLMRunner",
    "load_bilm_tf",
    "save_bilm_tf",
]
from .pipeline import Elmo, make_elmo  # noqa: E402  (registers the `elmo` factory and the architectures)
