"""Check that the exported bilm-tf/AllenNLP copy of a biLM is the same model.

    python project/scripts/check_roundtrip.py training/bilm/model training/bilm-tf corpus/heldout/gutenberg.txt \
        metrics/checks/roundtrip.json

Loads the original (native) model and the exported directory (options.json + weights.hdf5 +
vocab.txt), then requires (1) every weight array, softmax included, to be bit for bit equal,
(2) the same vocabulary, and (3) identical layer outputs for the first sentences of a text file.
"""

import argparse
from pathlib import Path
from typing import Any, Optional

import numpy

from common import exit_on, finish_check
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.io.arrays import bilm_arrays
from spacy_elmo.io.resolve import load_bilm


def sample_sentences(text: Path, n_sentences: int, max_tokens: int = 60) -> list[list[str]]:
    sentences = []
    for line in text.read_text(encoding="utf8").splitlines():
        tokens = line.split()[:max_tokens]
        if tokens:
            sentences.append(tokens)
        if len(sentences) >= n_sentences:
            break
    if not sentences:
        raise ValueError(f"{text}: no text to embed")
    return sentences


def check(original_dir: Path, exported_dir: Path, text: Path, n_sentences: int = 64) -> dict[str, Any]:
    original = load_bilm(original_dir)
    exported = load_bilm(exported_dir)
    a = dict(bilm_arrays(original))
    b = dict(bilm_arrays(exported))
    problems: list[str] = []
    if sorted(a) != sorted(b):
        problems.append(
            f"different weight names: only in original {sorted(set(a) - set(b))}, "
            f"only in export {sorted(set(b) - set(a))}"
        )
    unequal = [name for name in a if name in b and not numpy.array_equal(a[name], b[name])]
    if unequal:
        problems.append(f"weights differ: {unequal[:5]}")
    if original.vocab != exported.vocab:
        problems.append("vocabularies differ")
    sentences = sample_sentences(text, n_sentences)
    out_a = BiLMRunner(original).embed_sentences(sentences)
    out_b = BiLMRunner(exported).embed_sentences(sentences)
    diff = max(float(numpy.abs(x - y).max()) for x, y in zip(out_a, out_b))
    if diff != 0.0:
        problems.append(f"layer outputs differ (max abs diff {diff:.3e})")
    n_tokens = sum(len(s) for s in sentences)
    return {
        "passed": not problems,
        "original": str(original_dir),
        "exported": str(exported_dir),
        "n_weight_arrays": len(a),
        "has_softmax": "softmax/W" in a,
        "vocab_size": len(original.vocab or []),
        "sentences": len(sentences),
        "tokens": n_tokens,
        "max_abs_diff": diff,
        "problems": problems,
        "summary": (
            f"{len(a)} weight arrays bit for bit equal, identical vectors for {n_tokens} tokens"
            if not problems
            else "; ".join(problems)
        ),
    }


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("original", type=Path, help="the native model directory")
    parser.add_argument("exported", type=Path, help="the bilm-tf/AllenNLP directory it was exported to")
    parser.add_argument("text", type=Path, help="a text file, one paragraph a line, to embed")
    parser.add_argument("output", type=Path)
    parser.add_argument("--sentences", type=int, default=64)
    args = parser.parse_args(argv)
    with exit_on():
        result = check(args.original, args.exported, args.text, args.sentences)
    finish_check(result, args.output)


if __name__ == "__main__":
    main()
