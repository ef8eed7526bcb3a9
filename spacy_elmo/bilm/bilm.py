"""The bidirectional language model: token layer + contextual layers, every layer exposed."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy
import torch
from torch import nn

from .char_cnn import CharacterEncoder
from .lexicon import AnyLexicon, ByteLexicon
from .lstm import BiLSTMStack, LSTMState
from .options import BiLMOptions
from .precision import FP32, Products
from .softmax import SoftmaxHead
from .token_cache import TokenCache


@dataclass
class BiLMOutput:
    """layers: (L+1, B, T, 2P), layer 0 = [token; token]; mask: (B, T) bool, True at real tokens."""

    layers: torch.Tensor
    mask: torch.Tensor
    final_state: Optional[LSTMState] = None


class BiLM(nn.Module):
    """ELMo's biLM. Input: character ids (B, T, max_chars) in the AllenNLP layout (0 = no token), each row's
    tokens first; sentence boundaries are the caller's to add (`batch_to_ids`)."""

    def __init__(self, options: BiLMOptions, with_softmax: Optional[bool] = None) -> None:
        super().__init__()
        if with_softmax is None:
            with_softmax = options.n_tokens_vocab > 0
        if with_softmax and not options.n_tokens_vocab:
            raise ValueError("a softmax needs option 'n_tokens_vocab' (the vocabulary size)")
        self.options = options
        self.token_encoder = CharacterEncoder(options)
        self.lstm = BiLSTMStack(options)
        # only for models with a vocabulary (pretraining, or an export that kept it)
        self.softmax: Optional[SoftmaxHead] = (
            SoftmaxHead(options.n_tokens_vocab, options.projection_dim) if with_softmax else None
        )
        self.vocab: Optional[list[str]] = None
        # How it reads tokens: bilm-tf's byte ids, or (ELMoForManyLangs) vocabularies of its own.
        self.lexicon: AnyLexicon = ByteLexicon(options.max_characters_per_token)
        # Inference-time options (not weights): see `embed_tokens`.
        self.dedupe_tokens = True
        self.token_cache: Optional[TokenCache] = None

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> numpy.ndarray:
        """Sentences -> (B, T + 2, width) ids, framed by the sentence boundaries, as this model reads them."""
        return self.lexicon.batch_to_ids(sentences)

    def tokens_to_ids(self, tokens: Sequence[str]) -> numpy.ndarray:
        """Tokens -> (n, width) ids, without sentence boundaries."""
        return self.lexicon.tokens_to_ids(tokens)

    def set_token_cache(self, max_size: Optional[int]) -> None:
        """Keep the token vectors of up to `max_size` recent word types (None or 0: no cache)."""
        self.token_cache = TokenCache(max_size) if max_size else None

    def reset_parameters(self, seed: int = 0) -> None:
        """Random weights from `seed`, drawn on the CPU so that a seed gives the same weights on any device."""
        device = next(self.parameters()).device
        self.to("cpu")
        generator = torch.Generator().manual_seed(seed)
        self.token_encoder.reset_parameters(generator)
        self.lstm.reset_parameters(generator)
        if self.softmax is not None:
            self.softmax.reset_parameters(generator)
        self.to(device)

    @property
    def device(self) -> torch.device:
        return self.lstm.bias[0].device

    def embed_tokens(self, char_ids: torch.Tensor, products: Products = FP32) -> torch.Tensor:
        """(B, T, chars) ids -> the token layer (B, T, P), zero at padding; each distinct token through the CNN
        once (`dedupe_tokens`), and at inference not again if in the `token_cache`."""
        mask = char_ids.gt(0).any(-1)
        rows, inverse = char_ids[mask], None
        cache = self.token_cache if not self.training and not torch.is_grad_enabled() else None
        if cache is not None or self.dedupe_tokens:
            rows, inverse = torch.unique(rows, dim=0, return_inverse=True)
        vectors = (
            self.token_encoder(rows, products) if cache is None else cache.encode(rows, self.token_encoder, products)
        )
        if inverse is not None:
            vectors = vectors.index_select(0, inverse)
        out = vectors.new_zeros(*mask.shape, vectors.shape[-1])
        out[mask] = vectors
        return out

    def forward(
        self,
        char_ids: torch.Tensor,
        initial_state: Optional[LSTMState] = None,
        return_final_state: bool = False,
        dropout: float = 0.0,
        products: Products = FP32,
    ) -> BiLMOutput:
        """products: the precision of the matrix products (`precision.py`); float32 by default."""
        mask = char_ids.gt(0).any(-1)
        tokens = self.embed_tokens(char_ids, products)
        contextual, final = self.lstm(tokens, mask.sum(1), initial_state, return_final_state, dropout, products)
        layers = torch.stack([torch.cat([tokens, tokens], dim=-1), *contextual])  # layer 0: [token; token]
        return BiLMOutput(layers=layers, mask=mask, final_state=final)
