"""Listening to the `elmo` pipe, with spaCy's Tok2VecListener protocol: while training the pipe broadcasts
each batch's layers and backprop; at prediction a listener reads `doc._.elmo_layers`. The scalar mix after
it is the listening task's own.
"""

import warnings
from typing import Any, Callable, Optional

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, chain
from thinc.types import Floats2d, Floats3d

from ..extensions import LAYERS
from .scalar_mix import ScalarMix_v1

LISTENER_ARCHITECTURE = "spacy-elmo.ElmoListener.v1"
STANDALONE_ARCHITECTURE = "spacy-elmo.Elmo.v1"


class ElmoListener(Model):
    """The node of a task model that stands in for the `elmo` pipe's biLM. Dims: nO = 2P (a layer's width),
    nL = L+1 (the number of layers), from the upstream pipe (a configured `width` is checked against it)."""

    name = "elmo-listener"

    def __init__(self, upstream_name: str, width: int = 0) -> None:
        Model.__init__(self, name=self.name, forward=forward, init=init, dims={"nO": width or None, "nL": None})
        self.upstream_name = upstream_name
        self._batch_id: Optional[int] = None
        self._outputs: Optional[list[Floats3d]] = None
        self._backprop: Optional[Callable] = None
        # Set by the upstream pipe (find_listeners): () -> (nO, nL), loading its biLM if need be.
        self.upstream_dims: Optional[Callable[[], tuple[int, int]]] = None
        self._init_inputs: Optional[list[Doc]] = None

    @classmethod
    def get_batch_id(cls, inputs: list[Doc]) -> int:
        """A content hash of a batch, to check that a listener gets the batch its upstream embedded."""
        return sum(sum(token.orth for token in doc) for doc in inputs)

    def receive(self, batch_id: int, outputs: list[Floats3d], backprop: Callable) -> None:
        self._batch_id, self._outputs, self._backprop = batch_id, outputs, backprop

    def set_upstream_dims(self, width: int, n_layers: int) -> None:
        """Take the upstream biLM's width and layer count, or check them against those configured."""
        upstream = f"the upstream '{self.upstream_name}' biLM"
        for dim, value in (("nO", width), ("nL", n_layers)):
            if self.has_dim(dim) and self.get_dim(dim) != value:
                have = self.get_dim(dim)
                raise ValueError(
                    f"ElmoListener: width={have} but {upstream} gives vectors of width {width} (2 x projection_dim); "
                    f"set width = {width} or 0"
                    if dim == "nO"
                    else f"ElmoListener: built for {have} layers but {upstream} has {n_layers}"
                )
            if not self.has_dim(dim):
                self.set_dim(dim, value)

    def backprop_and_clear(self, d_outputs: list[Floats3d]) -> list[Doc]:
        """Run the upstream's backprop, then let go of the batch's outputs (and their graph)."""
        result = self._backprop(d_outputs) if self._backprop is not None else []
        self._batch_id = self._outputs = self._backprop = None
        return result


def forward(model: ElmoListener, docs: list[Doc], is_train: bool) -> tuple[list[Floats3d], Callable]:
    if is_train and model._batch_id is not None:
        batch_id = model.get_batch_id(docs)
        if batch_id != model._batch_id:
            raise ValueError(
                f"ElmoListener: got a batch ({batch_id}) that differs from the one the upstream "
                f"'{model.upstream_name}' pipe embedded ({model._batch_id}); a listening component "
                f"must be updated with the same examples as its upstream"
            )
        return model._outputs, model.backprop_and_clear  # type: ignore[return-value]
    outputs = []
    missing = 0
    for doc in docs:
        layers = doc._.get(LAYERS)
        if layers is not None:
            outputs.append(model.ops.asarray3f(layers))
            continue
        if is_train and len(doc):
            raise ValueError(
                f"ElmoListener: the upstream '{model.upstream_name}' pipe was not updated and did not "
                f"annotate the training docs. If it is in [training] frozen_components, also list it "
                f"in [training] annotating_components"
            )
        if len(doc):
            missing += 1
        outputs.append(model.ops.alloc3f(model.get_dim("nL"), len(doc), model.get_dim("nO")))
    if missing and docs is not model._init_inputs:
        warnings.warn(
            f"ElmoListener: {missing} doc(s) have no ELMo layers (doc._.elmo_layers is None): the "
            f"'{model.upstream_name}' pipe did not run before this component, so zeros were used",
            stacklevel=1,
        )
    return outputs, lambda d_outputs: []


def init(model: ElmoListener, X: Optional[list[Doc]] = None, Y: Any = None) -> None:
    if (not model.has_dim("nO") or not model.has_dim("nL")) and model.upstream_dims is not None:
        model.set_upstream_dims(*model.upstream_dims())
    if not model.has_dim("nO") or not model.has_dim("nL"):
        raise ValueError(
            f"ElmoListener: no upstream '{model.upstream_name}' pipe told this listener the biLM's "
            f"size. Add the 'elmo' pipe (named '{model.upstream_name}') before the listening component"
        )
    model._init_inputs = X


@registry.architectures(LISTENER_ARCHITECTURE)
def ElmoListener_v1(
    width: int = 0,
    upstream: str = "elmo",
    mix: Optional[Model[list[Floats3d], list[Floats2d]]] = None,
) -> Model[list[Doc], list[Floats2d]]:
    """Per-token ELMo vectors from an upstream `elmo` pipe, under this task's own scalar mix.

    width: 2 x the biLM's projection_dim, for a downstream layer that needs it when built; 0 = the upstream's.
    upstream: the name of the `elmo` pipe to listen to ("*" = any).
    mix: the scalar mix (default: spacy-elmo.ScalarMix.v1 with its defaults).
    """
    mix = mix if mix is not None else ScalarMix_v1()
    model: Model = chain(ElmoListener(upstream, width), mix)
    if width:
        model.set_dim("nO", width)
    return model


@registry.architectures(STANDALONE_ARCHITECTURE)
def Elmo_v1(
    bilm: Model[list[Doc], list[Floats3d]],
    mix: Optional[Model[list[Floats3d], list[Floats2d]]] = None,
) -> Model[list[Doc], list[Floats2d]]:
    """Per-token ELMo vectors from a biLM this model owns (what `nlp.replace_listeners` turns an
    ElmoListener.v1 into): bilm is a spacy-elmo.BiLM.v1 layer, mix a spacy-elmo.ScalarMix.v1."""
    mix = mix if mix is not None else ScalarMix_v1()
    return chain(bilm, mix)


def find_elmo_listeners(model: Model) -> list[ElmoListener]:
    return [node for node in model.walk() if isinstance(node, ElmoListener)]
