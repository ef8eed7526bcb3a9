"""The names the biLM layer and its runtimes share (apart from `bilm_model.py`, which imports the runtimes,
so that they need not import it back): the architecture, its options, and the saved weights' source.
"""

import contextlib
import contextvars
from collections.abc import Iterator

BILM_LAYER_NAME = "elmo-bilm"
ARCHITECTURE = "spacy-elmo.BiLM.v1"
PATH_OPTION = f"{ARCHITECTURE} model.path"
SHA256_OPTION = f"{ARCHITECTURE} model.sha256"
SAVED_WEIGHTS = "spacy-elmo pipeline weights"
SAVED_REMEDY = "save the pipeline again (nlp.to_disk) from a copy that loads, or train it again"
_saved_weights = contextvars.ContextVar("spacy_elmo_saved_weights", default=SAVED_WEIGHTS)


@contextlib.contextmanager
def saved_weights_at(path: str) -> Iterator[None]:
    """While saved weights are loaded from `path` (the pipe's `from_disk`), errors about them name it."""
    token = _saved_weights.set(path)
    try:
        yield
    finally:
        _saved_weights.reset(token)


def saved_weights_source() -> str:
    """How errors name the saved weights being loaded: their file, or `SAVED_WEIGHTS` where it is unknown."""
    return _saved_weights.get()
