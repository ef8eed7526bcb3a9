"""The optional tasks on data that cannot be redistributed: CoNLL-2003 NER and SST-5 sentiment.

    python project/scripts/optional_task.py conll --data-dir=/path/to/conll2003 --epochs 10 --elmo training/bilm/model
    python project/scripts/optional_task.py sst5  --data-dir=/path/to/sst5      --epochs 6  --elmo training/bilm/model

    python project/scripts/optional_task.py conll --train my/train.conll --dev my/dev.conll --test my/test.conll \
        --max-train-docs 2000 --variants baseline,elmo_shipped      # any file names; no pretraining needed

With neither --data-dir nor --train (the project's default) the task is skipped: a marker saying so is
written and results of an earlier run are removed, so the results table never shows stale numbers.
Otherwise the files are converted (--max-docs caps every split, --max-train-docs the training split
only), each variant is trained with `spacy train` (the same configs as the WNUT-17 / MR tasks) and
evaluated with `spacy evaluate` on dev, and on test when a test file is given
(metrics/eval/<task>-<variant>.json and .test.json). Variant "elmo" needs the project's biLM (--elmo);
"baseline" and "elmo_shipped" need no pretraining.

    conll: <dir>/train.txt, <dir>/valid.txt   (TOKEN POS CHUNK NER, -DOCSTART- lines)
    sst5:  <dir>/train.txt, <dir>/dev.txt     (LABEL sentence, LABEL 0-4)
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

import common
from common import TASKS, VARIANTS, Task, add_run_options
from convert_ner import convert as convert_ner
from convert_textcat import convert_sst5

OPTIONAL = sorted(name for name, task in TASKS.items() if not task.required)


def skip(task: str, metrics: Path) -> dict[str, object]:
    for stale in (metrics / "eval").glob(f"{task}-*.json"):  # dev and test
        stale.unlink()
    return {"task": task, "skipped": True, "reason": "no data directory given"}


def score_row(task: Task, run_record: dict) -> dict[str, object]:
    """A run's dev and test scores, named as spaCy's scorer names them and as people do."""
    row: dict[str, object] = {
        "variant": run_record["variant"],
        "metric": f"{task.metric_label} ({task.metric})",
        "dev": None,
        "test": None,
    }
    for split, path in run_record["scores"].items():
        scores = json.loads(Path(path).read_text(encoding="utf8"))
        row[split] = float(scores.get(task.component, scores)[task.metric])
    return row


def convert(task: Task, sources: dict[str, Optional[Path]], corpus: Path, max_docs: int, max_train: int):
    """The given splits as corpus/<task>/<split>.spacy; the number of docs of each."""
    splits = {}
    for split, source in sources.items():
        if source is None:
            continue
        cap = max_docs
        if split == "train" and max_train:
            cap = min(cap, max_train) if cap else max_train
        target = corpus / task.name / f"{split}.spacy"
        if task.component == "ner":
            splits[split] = convert_ner("conll", source, target, cap)
        else:
            splits[split] = convert_sst5(source, target, cap)
    return splits


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=OPTIONAL)
    parser.add_argument("--data-dir", default="", help="the data set's directory; empty = skip this task")
    for split in ("train", "dev", "test"):
        parser.add_argument(f"--{split}", default="", help=f"the {split} file (any name); overrides --data-dir's")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--max-docs", type=int, default=0, help="cap each split (0 = all)")
    parser.add_argument("--max-train-docs", type=int, default=0, help="cap the training split only (0 = all)")
    add_run_options(parser)
    args = parser.parse_args(argv)

    task = TASKS[args.task]
    marker = args.metrics / "optional" / f"{task.name}.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    if not args.data_dir.strip() and not args.train.strip():
        marker.write_text(json.dumps(skip(task.name, args.metrics), indent=2) + "\n", encoding="utf8")
        print(f"{task.name}: skipped (set its data directory variable to run it)")
        return
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        sys.exit(f"error: unknown variants {unknown}; expected some of {list(VARIANTS)}")

    sources = {
        split: Path(getattr(args, split)) if getattr(args, split) else None for split in ("train", "dev", "test")
    }
    for split, default in zip(("train", "dev"), task.files):
        if sources[split] is None:
            if not args.data_dir.strip():
                sys.exit(f"error: {task.name}: give --{split} (or --data-dir with {default} in it)")
            sources[split] = Path(args.data_dir) / default
    try:
        splits = convert(task, sources, args.corpus, args.max_docs, args.max_train_docs)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"error: {task.name}: {err}")
    if "elmo" in variants and not Path(args.elmo).exists():
        sys.exit(
            f"error: {task.name}: variant 'elmo' needs the project's biLM at {args.elmo} (run the pretraining "
            "and domain-adaptation steps first), or leave it out: --variants baseline,elmo_shipped"
        )

    runs = []
    for variant in variants:
        name = f"{task.name}-{variant}"
        wall = common.train(task, variant, args.epochs, args)
        scores = {}
        for split in ("dev", "test"):
            if split in splits:
                scores[split] = args.metrics / "eval" / (f"{name}.json" if split == "dev" else f"{name}.test.json")
                common.evaluate(name, args.corpus / task.name / f"{split}.spacy", scores[split], args)
        stale_test = args.metrics / "eval" / f"{name}.test.json"
        if "test" not in splits and stale_test.exists():
            stale_test.unlink()
        runs.append(
            {
                "variant": variant,
                "model": str(args.training / name / "model-best"),
                "scores": {split: str(path) for split, path in scores.items()},
                "wall_time_s": round(wall, 2),
            }
        )
    results = [score_row(task, r) for r in runs]
    for row in results:
        test = "-" if row["test"] is None else f"{100 * row['test']:.2f}"
        print(f"{task.name} {row['variant']:>12}: {row['metric']} dev {100 * row['dev']:.2f}  test {test}")
    record = {
        "task": task.name,
        "skipped": False,
        "files": {split: str(source) for split, source in sources.items() if source is not None},
        "sentences": splits,
        "runs": runs,
        "results": results,
    }
    marker.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    print(f"{task.name}: {len(runs)} runs evaluated on {' and '.join(s for s in ('dev', 'test') if s in splits)}")


if __name__ == "__main__":
    main()
