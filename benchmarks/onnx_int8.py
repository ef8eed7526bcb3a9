"""ONNX Runtime's dynamic int8 quantization of the exported biLM: within the package's int8 bound? faster?

    python benchmarks/onnx_int8.py [--configs small,full] [--batch-sizes 1,32] [--threads 1,2]

Why: the package's own int8 (`precision="int8"`, torch) is held to max |layer - fp32 layer| / max |fp32
layer| <= 5e-2 on every layer (`tests/bilm/test_precision.py`, `benchmarks/precision_quality.py`), and the
exported graph (`spacy_elmo export`) serves fp32 only. This asks whether `onnxruntime.quantization.
quantize_dynamic` on that graph would give a serving int8 within the same bound, and at what speed.

Quality: the package's metric, bound and sentences: the 30 sentences of the bilm-tf fixture through the
fixture biLM, three times over through the shipped model ("small", en_elmo_small) and once through a
full-size random one (seed 0, "full"); the reference is `BiLMRunner` at fp32 (the package's reference), per
layer the relative error above; the torch int8 path on the same metric for comparison. Quantized variants:
"default" (`quantize_dynamic` as it comes: QInt8 weights, per tensor, MatMul and Conv of the main graph),
"quint8", "per-channel", "subgraph" (`extra_options={"EnableSubgraph": True}`: also the MatMuls of the
recurrence, inside each LSTM layer's Scan body), "subgraph+per-channel", and "lstm" / "lstm+conv": every
MatMul int8, the Scan bodies' included, with the convolutions left fp32 / also int8. The LSTM input
weights reach their MatMul through an Unsqueeze, so the quantizer (MatMuls whose B is an initializer only)
skips them; "lstm" and "lstm+conv" fold those Unsqueezes into initializers first (`fold_weight_unsqueezes`).
The "ops" column counts the int8 ops (ConvInteger, MatMulInteger) and the fp32 ones left (Conv, MatMul) in
the main graph and in the Scan bodies.

Speed: tokens/s of `BiLMRunner` fp32 and int8 (torch, the package's path: in-batch dedup on) and of
`OnnxBiLM` on the fp32, "default" and "lstm" graphs (the same batching: `max_batch_size` = the batch size,
token budget 4096), sentences of wikitext-103 (valid), the same for every path. Every (configuration,
threads, batch size) runs the five paths one after the other, `--repeats` rounds, after one warm-up each:
median and (min-max) of the rounds, so the noise shows. In each round a path runs its sentences twice and
the second run is timed: on the machine this was written on (a small VM), the first run after another
path's was up to 2x slower (torch fp32, full, batch 32: 450 vs 930 tokens/s), its memory faulted in again.
"""

import argparse
import collections
import json
import logging
import os
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import numpy
import torch

import onnx
from common import describe_machine, emit
from onnx import numpy_helper
from spacy_elmo import load_bilm_tf
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import full_options
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.io import resolve as loading
from spacy_elmo.onnx.export import export_bytes, record_graph_sha256
from spacy_elmo.onnx.runtime import OnnxBiLM

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "elmo-fixture"
WIKITEXT = ROOT / "assets" / "wikitext" / "wiki103.valid.tokens"
BOUND = 5e-2  # tests/bilm/test_precision.py: BOUNDS["int8"]
INT8_OPS, FP32_OPS = ("ConvInteger", "MatMulInteger"), ("Conv", "MatMul")


def full_bilm() -> BiLM:
    bilm = BiLM(full_options())
    bilm.reset_parameters(0)
    bilm.eval()
    return bilm


def fold_weight_unsqueezes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The main graph's Unsqueezes of an initializer (the LSTM input weights) made initializers."""
    inits = {i.name: i for i in model.graph.initializer}
    keep = []
    for node in model.graph.node:
        if node.op_type == "Unsqueeze" and all(name in inits for name in node.input):
            data, axes = (numpy_helper.to_array(inits[name]) for name in node.input)
            folded = numpy.expand_dims(data, tuple(int(a) for a in axes))
            model.graph.initializer.append(numpy_helper.from_array(folded, node.output[0]))
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return model


# name -> (fold the LSTM input weights first, quantize_dynamic's keyword arguments)
VARIANTS: dict[str, tuple[bool, dict[str, Any]]] = {
    "default": (False, {}),
    "quint8": (False, {"weight_type": "QUInt8"}),
    "per-channel": (False, {"per_channel": True}),
    "subgraph": (False, {"extra_options": {"EnableSubgraph": True}}),
    "subgraph+per-channel": (False, {"per_channel": True, "extra_options": {"EnableSubgraph": True}}),
    "lstm": (True, {"op_types_to_quantize": ["MatMul"], "extra_options": {"EnableSubgraph": True}}),
    "lstm+conv": (True, {"op_types_to_quantize": ["MatMul", "Conv"], "extra_options": {"EnableSubgraph": True}}),
}
SPEED_VARIANTS = ("default", "lstm")


def quantize(graph: bytes, variant: str, tmp: Path) -> bytes:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fold, settings = VARIANTS[variant]
    settings = dict(settings)
    settings["weight_type"] = getattr(QuantType, settings.get("weight_type", "QInt8"))
    model = onnx.load_from_string(graph)
    if fold:
        model = fold_weight_unsqueezes(model)
    out = tmp / "quantized.onnx"
    quantize_dynamic(model, out, **settings)
    data = record_graph_sha256(onnx.load(str(out)))  # a quantized graph is a new graph: its own digest
    out.unlink()
    return data


def op_counts(graph: bytes) -> str:
    """'main: 5 ConvInteger, 3 MatMulInteger, 2 MatMul; Scan: 4 MatMul' (the counted op types only)."""
    counts: dict[str, collections.Counter] = {"main": collections.Counter(), "Scan": collections.Counter()}

    def walk(g: onnx.GraphProto, where: str) -> None:
        for node in g.node:
            if node.op_type in INT8_OPS + FP32_OPS:
                counts[where][node.op_type] += 1
            for attribute in node.attribute:
                for sub in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
                    walk(sub, "Scan")

    walk(onnx.load_from_string(graph).graph, "main")
    return "; ".join(
        f"{where}: " + ", ".join(f"{n} {op}" for op, n in sorted(c.items(), key=lambda kv: kv[0] not in INT8_OPS))
        for where, c in counts.items()
    )


def relative_errors(reference: list[numpy.ndarray], got: list[numpy.ndarray]) -> list[float]:
    """As tests/bilm/test_precision.py: per layer, max |layer - reference| / max |reference|."""
    errors = []
    for layer in range(reference[0].shape[0]):
        ref = numpy.concatenate([r[layer] for r in reference if r.size])
        out = numpy.concatenate([g[layer] for g in got if g.size])
        errors.append(float(numpy.abs(out.astype(numpy.float64) - ref).max() / numpy.abs(ref).max()))
    return errors


def wikitext_sentences(n: int, skip: int = 0) -> list[list[str]]:
    """Sentences (cut at " . ") of 5-60 tokens, in file order."""
    out: list[list[str]] = []
    for line in WIKITEXT.open(encoding="utf-8"):
        words = line.split()
        if not words or words[0] == "=":
            continue
        current: list[str] = []
        for word in words:
            current.append(word)
            if word == ".":
                if 5 <= len(current) <= 60:
                    out.append(current)
                current = []
        if len(out) >= skip + n:
            break
    return out[skip : skip + n]


def failure(message: str) -> str:
    """ONNX Runtime's long error in short: the failing node and the check that failed."""
    found = re.findall(r"while running (\w+) node\. Name:'([^']+)'", message)
    where = f"{found[-1][0]} node {found[-1][1]}: " if found else ""
    return where + message.rsplit("was false.", 1)[-1].strip()[-160:]


def spread(rates: Sequence[float]) -> str:
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def quality(models: dict[str, tuple[Callable[[], BiLM], int]], tmp: Path, output: str) -> list[str]:
    rows = []
    for model, (load, times) in models.items():
        bilm = load()
        groups = json.loads((FIXTURE / "sentences.json").read_text())
        sentences = [s.split() for group in groups for s in group] * times
        reference = BiLMRunner(bilm).embed_sentences(sentences)
        graph = export_bytes(bilm)
        results: dict[str, tuple[str, Any]] = {
            "torch int8": ("torch dynamic int8", BiLMRunner(bilm, precision="int8").embed_sentences(sentences)),
            "ORT fp32": (op_counts(graph), OnnxBiLM(graph).embed_sentences(sentences)),
        }
        for variant in VARIANTS:
            ops = ""
            try:
                quantized = quantize(graph, variant, tmp)
                ops = op_counts(quantized)
                results[f"ORT {variant}"] = (ops, OnnxBiLM(quantized).embed_sentences(sentences))
            except Exception as err:  # a variant ONNX Runtime cannot quantize or run: its message is the result
                results[f"ORT {variant}"] = (ops, f"{type(err).__name__}: {' '.join(str(err).split())}")
        for path, (ops, got) in results.items():
            record: dict[str, object] = {"bench": "onnx_int8_quality", "model": model, "path": path, "ops": ops}
            if isinstance(got, str):
                record["error"] = got
                cells = f"fails: {failure(got)} | | | |"
            else:
                errors = relative_errors(reference, got)
                record.update({f"L{i}_rel": float(f"{e:.3g}") for i, e in enumerate(errors)})
                within = "yes" if max(errors) <= BOUND else "**no**"
                cells = " | ".join(f"{e:.4f}" for e in errors) + f" | {within}"
            rows.append(f"| {model} | {path} | {ops} | {cells} |")
            emit({**record, "date": time.strftime("%Y-%m-%d")}, output)
        del bilm, reference, results
    return rows


def speed(args: argparse.Namespace, models: dict[str, Callable[[], BiLM]], tmp: Path) -> list[str]:
    rows = []
    for config, load in models.items():
        bilm = load()
        n_sentences = args.sentences if config != "full" else args.full_sentences
        repeats = args.repeats if config != "full" else args.full_repeats
        sentences = wikitext_sentences(n_sentences, skip=200)
        n_tokens = sum(map(len, sentences))
        graphs = {"fp32": export_bytes(bilm)}
        for variant in SPEED_VARIANTS:
            graphs[variant] = quantize(graphs["fp32"], variant, tmp)
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            for batch_size in (int(b) for b in args.batch_sizes.split(",")):
                runners: dict[str, Any] = {
                    "torch fp32": BiLMRunner(bilm, max_batch_size=batch_size, n_threads=threads),
                    "torch int8": BiLMRunner(bilm, precision="int8", max_batch_size=batch_size, n_threads=threads),
                }
                for name, graph in graphs.items():
                    runners[f"ORT {name}"] = OnnxBiLM(graph, n_threads=threads, max_batch_size=batch_size)
                rates: dict[str, list[float]] = {name: [] for name in runners}
                with torch.no_grad():
                    for runner in runners.values():
                        runner.embed_sentences(sentences[:batch_size])  # warm-up, weights prepared
                    for _ in range(repeats):
                        for name, runner in runners.items():
                            runner.embed_sentences(sentences)  # untimed: the run after another path's is slow
                            start = time.perf_counter()
                            runner.embed_sentences(sentences)
                            rates[name].append(n_tokens / (time.perf_counter() - start))
                med = {name: statistics.median(r) for name, r in rates.items()}
                cells = " | ".join(spread(rates[name]) for name in runners)
                ratios = " | ".join(
                    f"{med[f'ORT {v}'] / med['ORT fp32']:.2f}x / {med[f'ORT {v}'] / med['torch int8']:.2f}x"
                    for v in SPEED_VARIANTS
                )
                rows.append(f"| {config} | {threads} | {batch_size} | {cells} | {ratios} |")
                emit(
                    {
                        "bench": "onnx_int8_speed",
                        "config": config,
                        "threads": threads,
                        "batch_size": batch_size,
                        "n_tokens": n_tokens,
                        "tokens_per_s": {k: [round(x, 1) for x in v] for k, v in rates.items()},
                        "date": time.strftime("%Y-%m-%d"),
                    },
                    args.output,
                )
        del bilm, graphs
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="small,full")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--sentences", type=int, default=64, help="wikitext sentences timed (small)")
    parser.add_argument("--full-sentences", type=int, default=16, help="wikitext sentences timed (full)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (small)")
    parser.add_argument("--full-repeats", type=int, default=3, help="interleaved rounds (full)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--output", default="", help="also append the JSON lines here")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the quantizer's advice to run its pre-processing, per call
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)  # a variant that fails says why in its table row
    configs = args.configs.split(",")
    loaders: dict[str, Callable[[], BiLM]] = {"small": lambda: loading.load_bilm(""), "full": full_bilm}
    machine = describe_machine()
    print(
        f"machine: {machine['device']}; python {machine['python']}, torch {machine['torch']}, "
        f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}; load {os.getloadavg()}",
        flush=True,
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        quality_rows = []
        if not args.skip_quality:
            fixture = (lambda: load_bilm_tf(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5"), 1)
            chosen = {"fixture": fixture, **{c: (loaders[c], 3 if c == "small" else 1) for c in configs}}
            quality_rows = quality(chosen, tmp, args.output)
        speed_rows = speed(args, {c: loaders[c] for c in configs}, tmp)
    print(f"\nQuality: max |layer - fp32 layer| / max |fp32 layer| per layer (bound {BOUND:g} on each)\n")
    print("| model | path | ops (int8 first) | L0 rel | L1 rel | L2 rel | within |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(quality_rows))
    print("\nSpeed: tokens/s, median (min-max) of the rounds; x = ORT int8 over ORT fp32 / over torch int8\n")
    names = " | ".join(["torch fp32", "torch int8", "ORT fp32"] + [f"ORT int8 {v}" for v in SPEED_VARIANTS])
    ratio_names = " | ".join(f"{v}: x ORT fp32 / x torch int8" for v in SPEED_VARIANTS)
    print(f"| config | threads | batch | {names} | {ratio_names} |")
    print("|---" * (3 + 3 + 2 * len(SPEED_VARIANTS)) + "|")
    print("\n".join(speed_rows))
    print(f"\n{time.perf_counter() - started:.0f} s; load {os.getloadavg()}")


if __name__ == "__main__":
    main()
