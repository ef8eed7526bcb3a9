"""thinc layers and the registered architectures: the biLM layer, the scalar mix, the listener,
the standalone ELMo layer and the [x_k; ELMo_k] tok2vec."""

from .bilm_model import BiLM_v1, bilm_parameters, ensure_bilm
from .listener import Elmo_v1, ElmoListener, ElmoListener_v1, find_elmo_listeners
from .scalar_mix import ScalarMix_v1, mix_weights
from .tok2vec import ElmoTok2Vec_v1

__all__ = [
    "BiLM_v1",
    "ElmoListener",
    "ElmoListener_v1",
    "Elmo_v1",
    "ElmoTok2Vec_v1",
    "ScalarMix_v1",
    "bilm_parameters",
    "ensure_bilm",
    "find_elmo_listeners",
    "mix_weights",
]
