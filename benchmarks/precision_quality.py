"""How far each precision's layers are from fp32's: max abs and relative error per layer.

    python benchmarks/precision_quality.py [--precision fp32-torch,bf16,int8]

The 30 sentences of the bilm-tf fixture through the fixture biLM and (three times over) the shipped
model, stateless, one runner a precision; the reference is "fp32" (on the CPU: oneDNN's packed
products). "fp32-torch": fp32 through torch's own products. One JSON line per (model, precision):
for each layer, max |layer - reference| (abs) and that over max |reference| (rel).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import describe_machine, emit, products_named  # noqa: E402
from spacy_elmo import load_bilm_tf  # noqa: E402
from spacy_elmo.bilm.runner import BiLMRunner  # noqa: E402
from spacy_elmo.io import resolve as loading  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "elmo-fixture"


def embed(bilm: torch.nn.Module, precision: str, sentences: list[list[str]]) -> list[numpy.ndarray]:
    runner = BiLMRunner(bilm)
    runner.products = products_named(precision)
    return runner.embed_sentences(sentences)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", default="fp32-torch,bf16,int8")
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    groups = json.loads((FIXTURE / "sentences.json").read_text())
    sentences = [s.split() for group in groups for s in group]
    models = {
        "fixture": (load_bilm_tf(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5"), sentences),
        "shipped": (loading.load_bilm(""), sentences * 3),
    }
    machine = describe_machine()
    for model, (bilm, texts) in models.items():
        reference = embed(bilm, "fp32", texts)
        for precision in args.precision.split(","):
            got = embed(bilm, precision, texts)
            record: dict[str, object] = {"bench": "precision_quality", "model": model, "precision": precision}
            for layer in range(reference[0].shape[0]):
                ref = numpy.concatenate([r[layer] for r in reference if r.size])
                out = numpy.concatenate([g[layer] for g in got if g.size])
                error = float(numpy.abs(out.astype(numpy.float64) - ref).max())
                record[f"L{layer}_abs"] = round(error, 7)
                record[f"L{layer}_rel"] = float(f"{error / float(numpy.abs(ref).max()):.3g}")
            emit({**record, "date": time.strftime("%Y-%m-%d"), "device": machine["device"]}, args.output)


if __name__ == "__main__":
    main()
