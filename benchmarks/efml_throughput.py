"""An ELMoForManyLangs-layout biLM against a bilm-tf one of the same size: tokens/s through the runner.

    python benchmarks/efml_throughput.py [--batch-size 32] [--length 20] [--rounds 3]

Both are the paper's size (2 x 4096 -> 512 LSTMs, the 2048-filter CNN with 2 highway layers) with random
weights; the ELMoForManyLangs one is laid out as its released models are (a character vocabulary of
`--chars` entries, a 100-dim word embedding over `--words` entries, AllenNLP's highway and LSTM
parametrisation, character embedding 50); a bilm-tf model with that character embedding size too
(`bilm-tf-char50`) separates the layout's cost from the wider embedding's. Words in, per-sentence arrays
out (`BiLMRunner.embed_sentences`: what the pipe and `embed` run), in-batch dedup off so every token goes
through the CNN. Rounds alternate the models; the ratios are of the best times. fp32.
"""

import argparse
import time

import torch

from common import best_time, describe_machine, emit
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.lexicon import Lexicon
from spacy_elmo.bilm.options import full_options
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.io.efml import CHARACTER_ROLES, WORD_ROLES

SPECIALS = ["<oov>", "<pad>", "<bos>", "<eos>", "<bow>", "<eow>"]


def efml_model(n_chars: int, n_words: int) -> BiLM:
    options = full_options(
        char_embedding_dim=50,
        char_vocab_size=n_chars,
        word_vocab_size=n_words,
        word_dim=100,
        highway_gate="input",
        forget_bias=0.0,
    )
    bilm = BiLM(options)
    bilm.reset_parameters(0)
    characters = SPECIALS + [chr(0x20 + i) for i in range(n_chars - len(SPECIALS))]
    words = SPECIALS[:4] + [f"w{i}" for i in range(n_words - 4)]
    bilm.lexicon = Lexicon(characters, dict(CHARACTER_ROLES), options.max_characters_per_token, words, dict(WORD_ROLES))
    return bilm.eval()


def sentences(batch_size: int, length: int) -> list[list[str]]:
    generator = torch.Generator().manual_seed(batch_size * 1000 + length)
    picks = torch.randint(5000, (batch_size, length), generator=generator).tolist()
    return [[f"w{i}" if i % 2 else f"word{i}" for i in row] for row in picks]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--words", type=int, default=50000)
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    bilm_tf = BiLM(full_options())
    bilm_tf.reset_parameters(0)
    bilm_tf_50 = BiLM(full_options(char_embedding_dim=50))  # the character embedding size EFML's models use
    bilm_tf_50.reset_parameters(0)
    models = {
        "bilm-tf": bilm_tf.eval(),
        "bilm-tf-char50": bilm_tf_50.eval(),
        "efml": efml_model(args.chars, args.words),
    }
    batch = sentences(args.batch_size, args.length)
    best = {name: float("inf") for name in models}
    for _ in range(args.rounds):
        for name, bilm in models.items():
            bilm.dedupe_tokens = False
            runner = BiLMRunner(bilm)
            runner.embed_sentences(batch)  # warm
            best[name] = min(best[name], best_time(lambda runner=runner: runner.embed_sentences(batch), 1))
    n_tokens = args.batch_size * args.length
    emit(
        {
            "bench": "efml_throughput",
            "batch_size": args.batch_size,
            "length": args.length,
            "tokens_per_s": {name: round(n_tokens / t, 1) for name, t in best.items()},
            "efml_over_bilm_tf": round(best["bilm-tf"] / best["efml"], 3),
            "efml_over_bilm_tf_char50": round(best["bilm-tf-char50"] / best["efml"], 3),
            "date": time.strftime("%Y-%m-%d"),
            "device": describe_machine()["device"],
        },
        args.output,
    )


if __name__ == "__main__":
    main()
