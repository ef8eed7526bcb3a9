"""The Doc, Span and Token extensions the `elmo` pipe fills, and its opt-in vector hooks.

- doc._.elmo_layers: (n_layers, n_tokens, 2P) layer outputs (layer 0 = [token; token], layer j =
  [forward_j; backward_j]), or None; doc._.elmo_mix: the (n_layers,) weights of the pipe's default mix.
- doc._.elmo / span._.elmo / token._.elmo: the vectors under that mix, stored or mixed on access; where there
  are none, reading them raises `ElmoNotSetError` saying why (`getattr(doc._, "elmo", None)` gives None).

Only plain arrays are stored (in `doc.user_data`), so `Doc.to_bytes`, `DocBin(store_user_data=True)`
and `nlp.pipe(n_process=...)` keep them (numpy arrays; cupy arrays kept on the GPU do not serialize).
"""

from typing import Any, Optional, Union

import numpy
from spacy.tokens import Doc, Span, Token

from .mix import mix_layers

LAYERS = "elmo_layers"
MIX = "elmo_mix"
VECTORS = "elmo"
STORED_VECTORS = "_elmo_vectors"


class ElmoNotSetError(AttributeError):
    """`._.elmo` read on a doc without ELMo vectors. An AttributeError, so that `getattr(doc._, "elmo", None)`
    and `hasattr` work as for any missing attribute."""


def _rows(obj: Union[Doc, Span, Token]) -> Optional[Any]:
    """The ELMo vectors of a doc's, span's or token's tokens; None where the doc has none. The bounds are read,
    not sliced: `token._.elmo` runs once a token, and a new Span each time would cost more than the lookup."""
    if isinstance(obj, Token):
        start, end = obj.i, obj.i + 1
    else:
        start, end = (obj.start, obj.end) if isinstance(obj, Span) else (0, len(obj))
    stored = obj.doc._.get(STORED_VECTORS)
    if stored is not None:
        return stored[start:end]
    layers, weights = obj.doc._.get(LAYERS), obj.doc._.get(MIX)
    if layers is None or weights is None:
        return None
    return mix_layers(layers[:, start:end], weights)


def _elmo(obj: Union[Doc, Span, Token]) -> Any:
    """The `._.elmo` getter: the mixed vectors, or an error that says why there are none."""
    rows = _rows(obj)
    if rows is not None:
        return rows[0] if isinstance(obj, Token) else rows
    where = f"{type(obj).__name__.lower()}._.elmo"
    if obj.doc._.get(MIX) is None:
        raise ElmoNotSetError(
            f"{where}: the `elmo` pipe has not run on this doc. Docs get ELMo from nlp(text) or "
            f'nlp.pipe(texts) with the pipe in nlp.pipe_names (nlp.add_pipe("elmo")); a doc made by '
            f"nlp.make_doc or Doc(...), or read from a DocBin saved without user data, has none."
        )
    raise ElmoNotSetError(
        f'{where}: the `elmo` pipe was set to keep nothing on the doc (store = "none"); use store = '
        f'"layers", "vectors" or "both" to read ELMo vectors from docs.'
    )


def install_extensions() -> None:
    """Register the extensions (idempotent; an existing registration by this package is replaced)."""
    for name in (LAYERS, MIX, STORED_VECTORS):
        Doc.set_extension(name, default=None, force=True)
    for cls in (Doc, Span, Token):
        cls.set_extension(VECTORS, getter=_elmo, force=True)


def _vector(obj: Union[Doc, Span, Token]) -> numpy.ndarray:
    """The hooks' .vector: the mean of the tokens' ELMo vectors (a token's own); zeros without any."""
    rows = _rows(obj)
    if rows is None or not len(rows):  # an empty span's rows are (0, width)
        return numpy.zeros((0 if rows is None else rows.shape[-1],), dtype="float32")
    mean = rows.astype("float32").mean(axis=0)
    return mean.get() if hasattr(mean, "get") else mean


def _norm(vector: numpy.ndarray) -> float:
    return float(numpy.sqrt((vector.astype("float64") ** 2).sum()))


def cosine(a: Union[Doc, Span, Token, Any], b: Union[Doc, Span, Token, Any]) -> float:
    va, vb = numpy.asarray(a.vector, dtype="float64"), numpy.asarray(b.vector, dtype="float64")
    if va.shape != vb.shape:
        raise ValueError(
            f"similarity: vectors of different widths ({va.shape[-1]} and {vb.shape[-1]}); compare "
            f"objects embedded by the same elmo pipe"
        )
    na, nb = _norm(va), _norm(vb)
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(va.dot(vb) / (na * nb))


def set_vector_hooks(doc: Doc) -> None:
    """Make doc/span/token .vector, .vector_norm, .has_vector and .similarity use ELMo."""
    for hooks in (doc.user_hooks, doc.user_span_hooks, doc.user_token_hooks):
        hooks["vector"] = _vector
        hooks["vector_norm"] = lambda obj: _norm(_vector(obj))
        hooks["has_vector"] = lambda obj: _rows(obj.doc[0:0]) is not None
        hooks["similarity"] = cosine


install_extensions()
