"""Outputs of the spacy_elmo on PYTHONPATH, to compare two versions bit for bit (a refactor's check).

    PYTHONPATH=/path/to/old/checkout python benchmarks/output_parity.py dump old.npz
    python benchmarks/output_parity.py dump new.npz
    python benchmarks/output_parity.py compare old.npz new.npz
    python benchmarks/output_parity.py dump --smoke out.npz   # the fixture through the runner only
    python benchmarks/output_parity.py exactness [--models fixture,shipped,full] [--json out.json]

The fixture and the shipped model through the runner (stateless at several budgets, stateful, every
CPU precision, token layer), the `elmo` pipe (with and without sentence boundaries, stateful, every CPU
precision), and the CLI's `evaluate` (perplexities) and `embed` (whitespace and spaCy tokenization).
Works with older layouts too (`spacy_elmo.io.resolve.load_bilm` or `spacy_elmo.loading` before
`spacy_elmo.load_model`, pipe-level `stateful`), so a refactor can be checked against the commit before it.

`exactness`: how far each path's outputs are from a reference, per model size (the README's "Exactness"
table). For the bilm-tf test model, the shipped model and the paper's full-size shape (random weights): the
worst layer's max |difference| / max |reference|, and the max absolute difference, of torch fp32 against the
same model in float64 (the rounding any fp32 implementation has at that size), of the onnxruntime pipe
against the torch pipe, and for the test model of torch fp32 against bilm-tf's own activations (stateful).
"""

import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import h5py
import numpy
import spacy
import torch

FIX = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "elmo-fixture"


def model_loader() -> Callable[[str], Any]:
    """name or path -> BiLM, through whichever loader this version of the package has."""
    import spacy_elmo

    load_model = getattr(spacy_elmo, "load_model", None)
    if load_model is not None:
        return lambda name: load_model(name).bilm
    try:
        from spacy_elmo.io.resolve import load_bilm
    except ImportError:  # before the seam redesign
        from spacy_elmo.loading import load_bilm  # type: ignore[no-redef]
    return load_bilm


def bilm_tf_files() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(load_bilm_tf, save_bilm_tf), wherever this version of the package has them."""
    try:
        from spacy_elmo.io.hdf5 import load_bilm_tf, save_bilm_tf
    except ImportError:  # when they were top-level names
        from spacy_elmo import load_bilm_tf, save_bilm_tf  # type: ignore[attr-defined,no-redef]
    return load_bilm_tf, save_bilm_tf


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "spacy_elmo", *args], check=True, stdout=subprocess.DEVNULL)


def dump(path: str, smoke: bool = False) -> None:
    torch.set_num_threads(1)
    out: dict[str, numpy.ndarray] = {}
    import spacy_elmo
    from spacy_elmo import BiLMRunner

    load_bilm_tf, _ = bilm_tf_files()
    print("spacy_elmo from", spacy_elmo.__file__, file=sys.stderr)
    groups = json.loads((FIX / "sentences.json").read_text())
    sents = [s.split() for g in groups for s in g]
    ref = load_bilm_tf(FIX / "options.json", FIX / "lm_weights.hdf5")
    for budget in (1, 60, 4096):
        for i, a in enumerate(BiLMRunner(ref, token_budget=budget).embed_sentences(sents)):
            out[f"ref_b{budget}_{i}"] = a
    st = BiLMRunner(ref, stateful=True)
    for b in range(10):
        for k, a in enumerate(st.embed_batch([groups[0][b].split(), groups[1][b].split(), groups[2][b].split()])):
            out[f"ref_stateful_{b}_{k}"] = a
    out["ref_tokens"] = BiLMRunner(ref).embed_tokens((FIX / "vocab_test.txt").read_text().split("\n")[:200])
    if smoke:
        numpy.savez(path, **out)
        return
    for i, a in enumerate(BiLMRunner(ref, precision="bf16").embed_sentences(sents[:6])):
        out[f"ref_bf16_{i}"] = a
    shipped = model_loader()("en_elmo_small")
    for i, a in enumerate(BiLMRunner(shipped).embed_sentences(sents + [["x" * 300], ["ünï", "😀", "中文"], []])):
        out[f"shipped_{i}"] = a
    for precision in ("bf16", "int8"):
        for budget in (1, 4096):
            runner = BiLMRunner(shipped, precision=precision, token_budget=budget)
            for i, a in enumerate(runner.embed_sentences(sents[:12])):
                out[f"shipped_{precision}_b{budget}_{i}"] = a
    texts = [
        "The bank raised its rates. We sat on the river bank.",
        "",
        "   ",
        "one",
        " ".join(["word"] * 400),
        "Émile ate 😀 at the café. " * 20,
    ]
    for with_sents in (True, False):
        nlp = spacy.blank("en")
        if with_sents:
            nlp.add_pipe("sentencizer")
        nlp.add_pipe("elmo")
        for i, doc in enumerate(nlp.pipe(texts, batch_size=3)):
            out[f"pipe_{with_sents}_{i}"] = doc._.elmo_layers
            out[f"pipe_vec_{with_sents}_{i}"] = doc._.elmo
    for precision in ("bf16", "int8"):
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        nlp.add_pipe("elmo", config={"model": {"precision": precision}})
        for i, doc in enumerate(nlp.pipe(texts, batch_size=3)):
            out[f"pipe_{precision}_{i}"] = doc._.elmo_layers
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    try:
        nlp.add_pipe("elmo", config={"model": {"path": str(FIX), "stateful": True}})
    except Exception:  # before the seam redesign: stateful was the pipe's setting
        nlp.add_pipe("elmo", config={"stateful": True, "model": {"path": str(FIX)}})
    for i, doc in enumerate(nlp.pipe([" ".join(g[b].split()) for g in groups for b in range(3)], batch_size=4)):
        out[f"pipe_stateful_{i}"] = doc._.elmo_layers

    with tempfile.TemporaryDirectory() as tmp:
        run_the_cli(Path(tmp), sents, out)
    numpy.savez(path, **out)
    print(len(out), "arrays", file=sys.stderr)


def run_the_cli(d: Path, sents: list[list[str]], out: dict[str, numpy.ndarray]) -> None:
    """`evaluate` (perplexities) and `embed` (both tokenizers) on the fixture's sentences."""
    (d / "in.txt").write_text("\n".join(" ".join(s) for s in sents) + "\nThe café's ünïcode. Isn't it?\n")
    cli(
        "evaluate",
        "en_elmo_small",
        str(d / "in.txt"),
        "--format",
        "tokenized",
        "--threads",
        "1",
        "-o",
        str(d / "ev.json"),
    )
    for key, value in json.loads((d / "ev.json").read_text()).items():
        if isinstance(value, (int, float)):
            out[f"evaluate_{key}"] = numpy.array(value)
    for tok in ("whitespace", "en"):
        embed_out = d / f"out_{tok}.h5"
        cli(
            "embed",
            "en_elmo_small",
            str(d / "in.txt"),
            str(embed_out),
            "--layers",
            "all",
            "--tokenizer",
            tok,
            "--threads",
            "1",
        )
        with h5py.File(embed_out) as h:
            for k in h.keys():
                out[f"embed_{tok}_{k}"] = h[k][...]


def compare(old: str, new: str) -> int:
    a, b = numpy.load(old), numpy.load(new)
    if set(a.files) != set(b.files):
        print("different outputs:", sorted(set(a.files) ^ set(b.files)))
        return 1
    differ = [k for k in a.files if not (a[k].dtype == b[k].dtype and numpy.array_equal(a[k], b[k]))]
    print(f"{len(a.files)} arrays compared, {len(differ)} differ{': ' + ', '.join(differ[:20]) if differ else ''}")
    return 1 if differ else 0


EXTRA_SENTENCES = [["Ünïcödé", "日本語", "👍🏽", "Жжд"], ["x" * 300], [f"w{i}" for i in range(60)], ["a"]]


def worst(got: list[numpy.ndarray], expected: list[numpy.ndarray]) -> dict[str, float]:
    """Over all sentences, the worst layer's max |got - expected| / max |expected|, and max |got - expected|."""
    relative, absolute = 0.0, 0.0
    for g, e in zip(got, expected):
        if e.size:
            axes = tuple(range(1, e.ndim))
            difference = numpy.abs(g.astype("float64") - e.astype("float64")).max(axis=axes)
            scale = numpy.maximum(numpy.abs(e.astype("float64")).max(axis=axes), 1e-30)
            relative, absolute = (
                max(relative, float((difference / scale).max())),
                max(absolute, float(difference.max())),
            )
    return {"relative": relative, "absolute": absolute}


def float64_layers(bilm: Any, sentences: list[list[str]]) -> list[numpy.ndarray]:
    """The same weights computed in float64, each sentence alone (<bos>/<eos> dropped)."""
    double = copy.deepcopy(bilm).double().eval()
    with torch.no_grad():
        return [double(torch.from_numpy(double.batch_to_ids([s]))).layers[:, 0, 1:-1].numpy() for s in sentences]


def pipe_layers(path: str, runtime: str, sentences: list[list[str]]) -> list[numpy.ndarray]:
    """The `elmo` pipe's layers for pre-tokenized sentences (one sentence a doc), one thread."""
    from spacy.tokens import Doc

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": path, "runtime": runtime, "n_threads": 1}})
    nlp.initialize()
    return [doc._.elmo_layers for doc in nlp.pipe(Doc(nlp.vocab, words=s) for s in sentences)]


def reference_gap(bilm: Any) -> dict[str, float]:
    """torch fp32 against bilm-tf's activations: stateful, batch i = the i-th sentence of each group, the top
    layer as (forward, backward), as the reference ran."""
    from spacy_elmo import BiLMRunner

    groups = [[s.split() for s in group] for group in json.loads((FIX / "sentences.json").read_text())]
    runner = BiLMRunner(bilm, stateful=True, n_threads=1)
    got, expected = [], []
    for i in range(len(groups[0])):
        for k, layers in enumerate(runner.embed_batch([group[i] for group in groups])):
            half = layers.shape[-1] // 2
            got.append(numpy.stack([layers[-1][:, :half], layers[-1][:, half:]]))
            with h5py.File(FIX / f"lm_embeddings_{k}.hdf5", "r") as handle:
                expected.append(handle[str(i)][...])
    return worst(got, expected)


def exactness(argv: list[str]) -> None:
    import spacy_elmo
    from spacy_elmo import BiLM, BiLMRunner, load_model
    from spacy_elmo.bilm.options import full_options

    _, save_bilm_tf = bilm_tf_files()

    parser = argparse.ArgumentParser(prog="output_parity.py exactness")
    parser.add_argument("--models", default="fixture,shipped,full", help="comma-separated: fixture, shipped, full")
    parser.add_argument("--sentences", type=int, default=30, help="how many of the fixture's 30 sentences")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    groups = json.loads((FIX / "sentences.json").read_text())
    sentences = [s.split() for g in groups for s in g][: args.sentences] + EXTRA_SENTENCES
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            if name == "full":
                bilm = BiLM(full_options())
                bilm.reset_parameters(0)
                path = str(Path(tmp) / "full")
                Path(path).mkdir()
                save_bilm_tf(bilm, Path(path) / "options.json", Path(path) / "weights.hdf5")
            else:
                path = {"fixture": str(FIX), "shipped": "en_elmo_small"}[name]
            bilm = load_model(path).bilm.eval()
            fp32 = BiLMRunner(bilm, n_threads=1).embed_sentences(sentences)
            row: dict[str, Any] = {"model": name, "parameters": sum(p.numel() for p in bilm.parameters())}
            row["torch fp32 vs float64"] = worst(fp32, float64_layers(bilm, sentences))
            torch_pipe = pipe_layers(path, "torch", sentences)
            row["pipe vs runner"] = worst(torch_pipe, fp32)
            try:
                row["onnxruntime pipe vs torch pipe"] = worst(pipe_layers(path, "onnxruntime", sentences), torch_pipe)
            except ImportError as err:
                row["onnxruntime pipe vs torch pipe"] = f"not measured: {err}"
            if name == "fixture":
                row["torch fp32 vs bilm-tf"] = reference_gap(bilm)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("spacy_elmo from", spacy_elmo.__file__, "sentences:", len(sentences), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"sentences": len(sentences), "rows": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] == ["exactness"]:
        exactness(sys.argv[2:])
    elif sys.argv[1:2] == ["dump"] and len(sys.argv) == 3:
        dump(sys.argv[2])
    elif sys.argv[1:3] == ["dump", "--smoke"] and len(sys.argv) == 4:
        dump(sys.argv[3], smoke=True)
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
