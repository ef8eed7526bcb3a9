"""The paper's recipe for a task model: [x_k; ELMo_k], projected by a Maxout, -> the task encoder."""

from typing import Optional

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d


@registry.architectures("spacy-elmo.ElmoTok2Vec.v1")
def ElmoTok2Vec_v1(
    elmo: Model[list[Doc], list[Floats2d]],
    encode: Model[Floats2d, Floats2d],
    embed: Optional[Model[list[Doc], list[Floats2d]]] = None,
) -> Model[list[Doc], list[Floats2d]]:
    """elmo: per-token ELMo vectors (spacy-elmo.ElmoListener.v1 or spacy-elmo.Elmo.v1).
    encode: the task encoder (its input and output width is its `width`).
    embed: context-independent embeddings concatenated with ELMo (e.g. spacy.MultiHashEmbed.v2);
        None uses ELMo alone.
    """
    width = encode.get_dim("nO")
    features = concatenate(elmo, embed) if embed is not None else elmo
    project = Maxout(nO=width, nP=3, dropout=0.0, normalize=True)
    receptive_field = encode.attrs.get("receptive_field", 0)
    model: Model = chain(features, with_array(project), with_array(encode, pad=receptive_field))
    model.set_dim("nO", width)
    model.attrs["receptive_field"] = receptive_field
    return model
