"""Outputs of the spacy_elmo on PYTHONPATH, to compare two versions bit for bit (a refactor's check).

    PYTHONPATH=/path/to/old/checkout python benchmarks/output_parity.py dump old.npz
    python benchmarks/output_parity.py dump new.npz
    python benchmarks/output_parity.py compare old.npz new.npz
    python benchmarks/output_parity.py dump --smoke out.npz   # the fixture through the runner only

The fixture and the shipped model through the runner (stateless at several budgets, stateful, every
CPU precision, token layer), the `elmo` pipe (with and without sentence boundaries, stateful, every CPU
precision), and the CLI's `evaluate` (perplexities) and `embed` (whitespace and spaCy tokenization).
Works with older layouts too (`spacy_elmo.io.resolve.load_bilm` or `spacy_elmo.loading` before
`spacy_elmo.load_model`, pipe-level `stateful`), so a refactor can be checked against the commit before it.
"""

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


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "spacy_elmo", *args], check=True, stdout=subprocess.DEVNULL)


def dump(path: str, smoke: bool = False) -> None:
    torch.set_num_threads(1)
    out: dict[str, numpy.ndarray] = {}
    import spacy_elmo
    from spacy_elmo import BiLMRunner, load_bilm_tf

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


if __name__ == "__main__":
    if sys.argv[1:2] == ["dump"] and len(sys.argv) == 3:
        dump(sys.argv[2])
    elif sys.argv[1:3] == ["dump", "--smoke"] and len(sys.argv) == 4:
        dump(sys.argv[3], smoke=True)
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
