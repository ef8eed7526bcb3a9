"""How much of a text classification task a biLM's layers know: a linear probe.

    python project/scripts/probe_layers.py training/bilm-domain/model corpus/textcat metrics/probe.json

Each doc becomes the mean and the max over its tokens of one biLM layer (or all of them); a
logistic regression is trained on train, its weight decay picked on dev, and dev and test accuracy
reported. A bag-of-words logistic regression (word types seen twice in train) on the same splits is
the reference: a layer below it tells little about the labels that word identity does not. Used to
find out why ELMo from a small biLM does not help on MR (see project/results/README.md).
"""

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy
import spacy
import torch
from spacy.tokens import Doc, DocBin

import spacy_elmo  # noqa: F401  (registers the elmo factory)

WEIGHT_DECAYS = (1e-4, 1e-3, 1e-2)


def read_split(nlp: spacy.Language, directory: Path, split: str) -> tuple[list[Doc], torch.Tensor]:
    docs = list(DocBin().from_disk(directory / f"{split}.spacy").get_docs(nlp.vocab))
    labels = sorted(docs[0].cats)
    return docs, torch.tensor([labels.index(max(d.cats, key=d.cats.get)) for d in docs])


def pooled_layers(nlp: spacy.Language, docs: Sequence[Doc]) -> numpy.ndarray:
    """(n_docs, n_layers, 2 * 2P): mean and max over the tokens of each layer."""
    rows = []
    for doc in nlp.pipe(docs, batch_size=256):
        layers = numpy.asarray(doc._.elmo_layers, dtype=numpy.float32)
        rows.append(numpy.concatenate([layers.mean(axis=1), layers.max(axis=1)], axis=1))
    return numpy.stack(rows)


def fit(model: torch.nn.Module, inputs, y: torch.Tensor, weight_decay: float, epochs: int = 40) -> None:
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=weight_decay)
    for _ in range(epochs):
        for batch in torch.randperm(len(y)).split(64):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(*[x[batch] for x in inputs]), y[batch]).backward()
            optimizer.step()


def accuracy(model: torch.nn.Module, inputs, y: torch.Tensor) -> float:
    with torch.no_grad():
        return 100.0 * float((model(*inputs).argmax(1) == y).float().mean())


def probe(make, data: dict[str, tuple[list, torch.Tensor]]) -> dict[str, float]:
    """The weight decay with the best dev accuracy, and its dev and test accuracy."""
    best: dict[str, float] = {}
    for weight_decay in WEIGHT_DECAYS:
        model = make()
        fit(model, *data["train"], weight_decay)
        dev, test = accuracy(model, *data["dev"]), accuracy(model, *data["test"])
        if not best or dev > best["dev"]:
            best = {"dev": dev, "test": test, "weight_decay": weight_decay}
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="biLM: native or bilm-tf directory, or a shipped model name")
    parser.add_argument("corpus", type=Path, help="directory with train.spacy, dev.spacy, test.spacy")
    parser.add_argument("output", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": args.model}})
    splits = {name: read_split(nlp, args.corpus, name) for name in ("train", "dev", "test")}
    n_labels = int(max(int(y.max()) for _, y in splits.values())) + 1
    results: dict[str, dict[str, float]] = {}

    features = {name: pooled_layers(nlp, docs) for name, (docs, _) in splits.items()}
    mean, std = features["train"].mean(axis=0), features["train"].std(axis=0) + 1e-6
    n_layers = features["train"].shape[1]
    for layers in [[i] for i in range(n_layers)] + [list(range(n_layers))]:
        data = {
            name: ([torch.from_numpy(((features[name] - mean) / std)[:, layers].reshape(len(y), -1))], y)
            for name, (_, y) in splits.items()
        }
        width = data["train"][0][0].shape[1]
        key = "layer " + "+".join(map(str, layers))
        results[key] = probe(lambda width=width: torch.nn.Linear(width, n_labels), data)
        print(f"{key}: {results[key]}", flush=True)

    counts = Counter(t.lower_ for d in splits["train"][0] for t in d)
    vocab = {w: i + 1 for i, w in enumerate(w for w, c in counts.items() if c >= 2)}  # 0 = unseen

    def bag(docs: Sequence[Doc]) -> torch.Tensor:
        """Word counts (n_docs, n_words + 1); column 0 counts the words not in `vocab`."""
        matrix = torch.zeros(len(docs), len(vocab) + 1)
        for row, doc in enumerate(docs):
            for token in doc:
                matrix[row, vocab.get(token.lower_, 0)] += 1.0
        return matrix

    data = {name: ([bag(docs)], y) for name, (docs, y) in splits.items()}
    results["bag of words"] = probe(lambda: torch.nn.Linear(len(vocab) + 1, n_labels), data)
    print(f"bag of words: {results['bag of words']}", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"model": args.model, "probes": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
