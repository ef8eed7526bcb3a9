"""A short tour: `python -m spacy_elmo.demo [MODEL]` loads a biLM (by default the shipped English one),
embeds sentences, and shows the layers and a similarity."""

import sys
import time

import numpy

from .bilm.runner import BiLMRunner
from .io.resolve import DEFAULT_MODEL, load_model

SENTENCES = [
    "We sat on the bank of the river and watched the water .".split(),
    "The bank raised its interest rates on savings accounts .".split(),
    "She deposited the cheque at the bank on Monday .".split(),
    "Fish swam near the muddy bank of the stream .".split(),
]


def cosine(a: numpy.ndarray, b: numpy.ndarray) -> float:
    return float(a @ b / (numpy.linalg.norm(a) * numpy.linalg.norm(b) + 1e-12))


def main(model: str = DEFAULT_MODEL) -> None:
    started = time.perf_counter()
    bilm = load_model(model).bilm
    o = bilm.options
    print(f"model: {model}")
    print(
        f"  char CNN {o.n_filters} filters, {o.n_highway} highway, {o.n_layers}x LSTM {o.lstm_dim}->{o.projection_dim}"
    )
    embedder = BiLMRunner(bilm)
    layers = embedder.embed_sentences(SENTENCES)
    print(f"loaded and embedded {len(SENTENCES)} sentences in {time.perf_counter() - started:.2f}s")
    for sentence, array in zip(SENTENCES, layers):
        text = " ".join(sentence)
        text = text if len(text) <= 48 else text[:45] + "..."
        print(f"  {text:48s}  layers {array.shape}  (n_layers + 1, n_tokens, 2P)")
    bank = [array[-1, sentence.index("bank")] for sentence, array in zip(SENTENCES, layers)]
    print("top-layer cosine of 'bank' (river, money, money, river):")
    for a in bank:
        print("  " + "  ".join(f"{cosine(a, b):+.3f}" for b in bank))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL)
