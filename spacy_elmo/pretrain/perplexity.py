"""Forward, backward and average perplexity of a biLM with its full softmax.

Each sentence is `<S> w1 .. wn </S>` read from a zero state (as the biLM is used for embedding): the
forward LM predicts w1 .. wn, `</S>`, the backward LM `<S>`, w1 .. wn. Words outside the model's vocabulary
are predicted as `<UNK>` (reported as `oov_rate`: it makes perplexities over different vocabularies
incomparable). `average_ppl` is the geometric mean of the two perplexities.
"""

import math
from typing import Optional

import torch

from ..bilm.bilm import BiLM
from .batches import sentence_batches
from .corpus import TokenStream
from .sampled_softmax import directional_nll
from .vocab import UNK_ID, Vocab


class NoSoftmaxError(ValueError):
    """Perplexity needs the language-model head, which imported bilm-tf/AllenNLP dumps lack."""


@torch.no_grad()
def stream_perplexity(
    bilm: BiLM,
    stream: TokenStream,
    vocab: Optional[Vocab] = None,
    max_tokens: Optional[int] = None,
) -> dict[str, float]:
    """Perplexity over the sentences of a prepared corpus (the first `max_tokens` tokens' worth)."""
    if bilm.softmax is None:
        raise NoSoftmaxError(
            "this biLM has no softmax (language-model head), so its perplexity is undefined; "
            "bilm-tf/AllenNLP weight dumps leave it out: fine-tune with `spacy elmo pretrain --init-from`"
        )
    if vocab is None:
        if bilm.vocab is None:
            raise NoSoftmaxError("this biLM has no vocabulary, so its softmax ids cannot be matched to words")
        vocab = Vocab(bilm.vocab, source="model vocabulary")
    batches = sentence_batches(stream.tokens, stream.type_chars(), stream.type_to_vocab(vocab), max_tokens=max_tokens)
    was_training = bilm.training
    bilm.eval()
    total_f = total_b = 0.0
    n = n_unk = 0
    try:
        for batch in batches:
            batch = batch.to(bilm.device)
            out = bilm(batch.char_ids)
            f, b, count = directional_nll(
                out.layers[-1], batch.next_ids, batch.prev_ids, bilm.softmax.weight, bilm.softmax.bias
            )
            total_f += float(f)
            total_b += float(b)
            n += count
            n_unk += int((batch.next_ids == UNK_ID).sum())
    finally:
        bilm.train(was_training)
    if n == 0:
        raise ValueError("no tokens to evaluate")
    f_mean, b_mean = total_f / n, total_b / n
    return {
        "forward_ppl": math.exp(f_mean),
        "backward_ppl": math.exp(b_mean),
        "average_ppl": math.exp((f_mean + b_mean) / 2),
        "n_tokens": n,
        "oov_rate": n_unk / n,
    }
