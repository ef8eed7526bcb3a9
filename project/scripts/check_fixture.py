"""Import the bilm-tf/AllenNLP test fixture and hold it to its reference embeddings.

    python project/scripts/check_fixture.py tests/fixtures/elmo-fixture metrics/checks/fixture_parity.json \
        [--model training/fixture-native]

--model checks a converted copy of the fixture's weights (e.g. the native model that
`spacy elmo convert` made from it) instead of importing the fixture's own HDF5 file.

The fixture's `lm_embeddings_k.hdf5` holds the top layer (forward, backward) of sentence i of
`sentences.json[k]`, written by ONE stateful biLM that ran 10 batches of 3 sentences,
batch i = [s[0][i], s[1][i], s[2][i]]. So: stateful mode must match all 30 sentences; stateless
mode must match batch 0 (which started from zero state); the token layer must match
`elmo_token_embeddings.hdf5` for the lines of `vocab_test.txt`. Tolerance: allclose(atol=1e-6, rtol=1e-5).
"""

import argparse
import json
from pathlib import Path
from typing import Any, Optional

import h5py
import numpy

from common import exit_on, finish_check
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.io.hdf5 import load_bilm_tf
from spacy_elmo.io.resolve import load_bilm

ATOL, RTOL = 1e-6, 1e-5


def top_layer(layers: numpy.ndarray, projection_dim: int) -> numpy.ndarray:
    """(L+1, T, 2P) -> (2, T, P): the top layer split into forward and backward halves."""
    return numpy.stack([layers[-1, :, :projection_dim], layers[-1, :, projection_dim:]])


def check(fixture: Path, model: Optional[Path] = None) -> dict[str, Any]:
    if model is None:
        bilm = load_bilm_tf(fixture / "options.json", fixture / "lm_weights.hdf5")
    else:
        bilm = load_bilm(model)
    P = bilm.options.projection_dim
    sentences: list[list[str]] = json.loads((fixture / "sentences.json").read_text(encoding="utf8"))
    refs = []
    for k in range(len(sentences)):
        with h5py.File(fixture / f"lm_embeddings_{k}.hdf5", "r") as handle:
            refs.append({key: handle[key][...] for key in handle})
    n_batches = len(sentences[0])

    stateful = BiLMRunner(bilm, stateful=True)
    stateless = BiLMRunner(bilm)
    worst_stateful = worst_stateless = 0.0
    failures: list[str] = []
    for i in range(n_batches):
        batch = [sentences[k][i].split() for k in range(len(sentences))]
        outputs = stateful.embed_batch(batch)
        plain = stateless.embed_sentences(batch) if i == 0 else None
        for k, layers in enumerate(outputs):
            ref = refs[k][str(i)]
            got = top_layer(layers, P)
            worst_stateful = max(worst_stateful, float(numpy.abs(got - ref).max()))
            if got.shape != ref.shape or not numpy.allclose(got, ref, atol=ATOL, rtol=RTOL):
                failures.append(f"stateful batch {i} sentence {k}")
            if plain is not None:
                got0 = top_layer(plain[k], P)
                worst_stateless = max(worst_stateless, float(numpy.abs(got0 - ref).max()))
                if not numpy.allclose(got0, ref, atol=ATOL, rtol=RTOL):
                    failures.append(f"stateless batch 0 sentence {k}")

    vocab = [line for line in (fixture / "vocab_test.txt").read_text(encoding="utf8").split("\n") if line]
    with h5py.File(fixture / "elmo_token_embeddings.hdf5", "r") as handle:
        token_ref = handle["embedding"][...]
    token_got = stateless.embed_tokens(vocab)
    token_diff = float(numpy.abs(token_got - token_ref).max()) if token_got.shape == token_ref.shape else float("inf")
    if not numpy.isfinite(token_diff) or not numpy.allclose(token_got, token_ref, atol=ATOL, rtol=RTOL):
        failures.append("token layer")
    passed = not failures
    return {
        "passed": passed,
        "fixture": str(fixture),
        "model": str(model) if model is not None else str(fixture / "lm_weights.hdf5"),
        "sentences_checked": n_batches * len(sentences),
        "tokens_checked": len(vocab),
        "max_abs_diff_stateful": worst_stateful,
        "max_abs_diff_stateless_batch0": worst_stateless,
        "max_abs_diff_token_layer": token_diff,
        "atol": ATOL,
        "rtol": RTOL,
        "failures": failures,
        "summary": (
            f"{n_batches * len(sentences)} sentences (stateful) and {len(vocab)} tokens match the bilm-tf "
            f"reference, max abs diff {max(worst_stateful, token_diff):.2e}"
            if passed
            else "mismatch: " + ", ".join(failures)
        ),
    }


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fixture", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument(
        "--model", type=Path, default=None, help="check this model instead of the fixture's own weights"
    )
    args = parser.parse_args(argv)
    with exit_on():
        result = check(args.fixture, args.model)
    finish_check(result, args.output)


if __name__ == "__main__":
    main()
