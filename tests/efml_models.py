"""A small random ELMoForManyLangs-style biLM (its own character and word vocabularies), for the tests of
every path that must serve such models (io, onnx)."""

import torch

from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.lexicon import Lexicon
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.io.efml import CHARACTER_ROLES, WORD_ROLES

CHARS = ["<bow>", "<eow>", "<pad>", "<oov>", "<bos>", "<eos>", "\u3000", *"abcdeéЖжд中文👍"]
WORDS = ["<oov>", "<pad>", "<bos>", "<eos>", "the", "cat", "жд"]


def efml_bilm(word_dim: int = 5, seed: int = 0) -> BiLM:
    options = BiLMOptions(
        filters=[(1, 4), (2, 8), (3, 6)],
        char_embedding_dim=6,
        n_highway=2,
        activation="tanh",
        lstm_dim=20,
        projection_dim=8,
        n_layers=2,
        max_characters_per_token=12,
        char_vocab_size=len(CHARS),
        word_vocab_size=len(WORDS) if word_dim else 0,
        word_dim=word_dim,
        highway_gate="input",
        forget_bias=0.0,
        cell_clip=2.5,
        proj_clip=2.0,
    )
    bilm = BiLM(options)
    bilm.reset_parameters(seed)
    with torch.no_grad():  # nonzero biases everywhere, so that where each one goes is tested
        generator = torch.Generator().manual_seed(seed + 1)
        for name, param in bilm.named_parameters():
            if "bias" in name or name.endswith("_b"):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    bilm.lexicon = Lexicon(
        CHARS, dict(CHARACTER_ROLES), 12, WORDS if word_dim else None, dict(WORD_ROLES) if word_dim else {}
    )
    return bilm.eval()
