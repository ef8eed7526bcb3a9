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
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from convert_ner import convert as convert_ner
from convert_textcat import convert_sst5

TASKS: dict[str, dict[str, str]] = {
    "conll": {"kind": "ner", "train": "train.txt", "dev": "valid.txt", "component": "ner", "metric": "ents_f"},
    "sst5": {
        "kind": "textcat",
        "train": "train.txt",
        "dev": "dev.txt",
        "component": "textcat",
        "metric": "cats_micro_f",
    },
}
# what each of spaCy's score keys means here (single-label SST-5: micro-averaged F equals accuracy)
METRIC_NAMES = {"ents_f": "entity F1", "cats_micro_f": "accuracy"}
VARIANTS = ("baseline", "elmo", "elmo_shipped")


def run(command: list[str], threads: int = 0) -> float:
    """Run a command with this interpreter (math libraries capped at `threads`, 0 = their default);
    its wall time in seconds. Fails loudly."""
    env = os.environ.copy()
    if threads > 0:
        env.update({name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
    started = time.time()
    result = subprocess.run([sys.executable, *command], env=env)
    if result.returncode != 0:
        sys.exit(f"error: command failed ({result.returncode}): python {' '.join(command)}")
    return time.time() - started


def skip(task: str, metrics: Path) -> dict[str, object]:
    for stale in (metrics / "eval").glob(f"{task}-*.json"):  # dev and test
        stale.unlink()
    return {"task": task, "skipped": True, "reason": "no data directory given"}


def score_row(task: str, run_record: dict) -> dict[str, object]:
    """A run's dev and test scores, named as spaCy's scorer names them and as people do."""
    spec = TASKS[task]
    row: dict[str, object] = {
        "variant": run_record["variant"],
        "metric": f"{METRIC_NAMES[spec['metric']]} ({spec['metric']})",
        "dev": None,
        "test": None,
    }
    for split, path in run_record["scores"].items():
        scores = json.loads(Path(path).read_text(encoding="utf8"))
        row[split] = float(scores.get(spec["component"], scores)[spec["metric"]])
    return row


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--data-dir", default="", help="the data set's directory; empty = skip this task")
    for split in ("train", "dev", "test"):
        parser.add_argument(f"--{split}", default="", help=f"the {split} file (any name); overrides --data-dir's")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--eval-frequency", type=int, default=200)
    parser.add_argument("--elmo", default="training/bilm/model", help="the project's biLM (variant 'elmo')")
    parser.add_argument("--pretrained-elmo", default="", help="variant 'elmo_shipped': '' = the shipped model")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--gpu-id", type=int, default=-1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=0, help="threads per process for the math libraries (0 = default)"
    )
    parser.add_argument("--max-docs", type=int, default=0, help="cap each split (0 = all)")
    parser.add_argument("--max-train-docs", type=int, default=0, help="cap the training split only (0 = all)")
    parser.add_argument("--configs", type=Path, default=Path("project/configs"))
    parser.add_argument("--corpus", type=Path, default=Path("corpus"))
    parser.add_argument("--training", type=Path, default=Path("training"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics"))
    args = parser.parse_args(argv)

    spec = TASKS[args.task]
    marker = args.metrics / "optional" / f"{args.task}.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    if not args.data_dir.strip() and not args.train.strip():
        marker.write_text(json.dumps(skip(args.task, args.metrics), indent=2) + "\n", encoding="utf8")
        print(f"{args.task}: skipped (set its data directory variable to run it)")
        return
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        sys.exit(f"error: unknown variants {unknown}; expected some of {list(VARIANTS)}")

    data_dir = Path(args.data_dir)
    sources = {
        split: Path(getattr(args, split)) if getattr(args, split) else None for split in ("train", "dev", "test")
    }
    for split in ("train", "dev"):
        if sources[split] is None:
            if not args.data_dir.strip():
                sys.exit(f"error: {args.task}: give --{split} (or --data-dir with {spec[split]} in it)")
            sources[split] = data_dir / spec[split]
    corpus = args.corpus / args.task
    splits = {}
    try:
        for split, source in sources.items():
            if source is None:
                continue
            target = corpus / f"{split}.spacy"
            cap = args.max_docs
            if split == "train" and args.max_train_docs:
                cap = min(cap, args.max_train_docs) if cap else args.max_train_docs
            if spec["kind"] == "ner":
                splits[split] = convert_ner("conll", source, target, cap)
            else:
                splits[split] = convert_sst5(source, target, cap)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"error: {args.task}: {err}")
    if "elmo" in variants and not Path(args.elmo).exists():
        sys.exit(
            f"error: {args.task}: variant 'elmo' needs the project's biLM at {args.elmo} (run the pretraining "
            "and domain-adaptation steps first), or leave it out: --variants baseline,elmo_shipped"
        )

    runs = []
    for variant in variants:
        name = f"{args.task}-{variant}"
        config = args.configs / f"{spec['kind']}_{'baseline' if variant == 'baseline' else 'elmo'}.cfg"
        output = args.training / name
        train = [
            "-m",
            "spacy",
            "train",
            str(config),
            "--output",
            str(output),
            "--paths.train",
            str(corpus / "train.spacy"),
            "--paths.dev",
            str(corpus / "dev.spacy"),
            "--gpu-id",
            str(args.gpu_id),
            "--system.seed",
            str(args.seed),
            "--training.max_epochs",
            str(args.epochs),
            "--training.max_steps",
            str(args.max_steps),
            "--training.eval_frequency",
            str(args.eval_frequency),
        ]
        if variant == "elmo":
            train.append(f"--paths.elmo={args.elmo}")
        elif variant == "elmo_shipped":
            train.append(f"--paths.elmo={args.pretrained_elmo}")
        wall = run(train, args.threads)
        (output / "timing.json").write_text(
            json.dumps({"command": train, "wall_time_s": round(wall, 2)}, indent=2) + "\n"
        )
        scores = {}
        for split in ("dev", "test"):
            if split not in splits:
                continue
            scores[split] = args.metrics / "eval" / (f"{name}.json" if split == "dev" else f"{name}.test.json")
            run(
                [
                    "-m",
                    "spacy",
                    "evaluate",
                    str(output / "model-best"),
                    str(corpus / f"{split}.spacy"),
                    "--output",
                    str(scores[split]),
                    "--per-component",
                    "--gpu-id",
                    str(args.gpu_id),
                ],
                args.threads,
            )
        stale_test = args.metrics / "eval" / f"{name}.test.json"
        if "test" not in splits and stale_test.exists():
            stale_test.unlink()
        runs.append(
            {
                "variant": variant,
                "model": str(output / "model-best"),
                "scores": {split: str(path) for split, path in scores.items()},
                "wall_time_s": round(wall, 2),
            }
        )
    results = [score_row(args.task, r) for r in runs]
    for row in results:
        test = "-" if row["test"] is None else f"{100 * row['test']:.2f}"
        print(f"{args.task} {row['variant']:>12}: {row['metric']} dev {100 * row['dev']:.2f}  test {test}")
    record = {
        "task": args.task,
        "skipped": False,
        "files": {split: str(source) for split, source in sources.items() if source is not None},
        "sentences": splits,
        "runs": runs,
        "results": results,
    }
    marker.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    print(f"{args.task}: {len(runs)} runs evaluated on {' and '.join(s for s in ('dev', 'test') if s in splits)}")


if __name__ == "__main__":
    main()
