"""The optional tasks on data that cannot be redistributed: CoNLL-2003 NER and SST-5 sentiment.

    python project/scripts/optional_task.py conll --data-dir=/path/to/conll2003 --epochs 10 --elmo training/bilm/model
    python project/scripts/optional_task.py sst5  --data-dir=/path/to/sst5      --epochs 6  --elmo training/bilm/model

With an empty --data-dir (the project's default) the task is skipped: a marker saying so is written
and results of an earlier run are removed, so the results table never shows stale numbers.
Otherwise the train and dev files are converted, each variant is trained with `spacy train`
(the same configs as the WNUT-17 / MR tasks) and evaluated with `spacy evaluate` on dev, the
split to report: both data sets' test splits are held back.

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
    "conll": {"kind": "ner", "train": "train.txt", "dev": "valid.txt"},
    "sst5": {"kind": "textcat", "train": "train.txt", "dev": "dev.txt"},
}
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
    for stale in (metrics / "eval").glob(f"{task}-*.json"):
        stale.unlink()
    return {"task": task, "skipped": True, "reason": "no data directory given"}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--data-dir", default="", help="the data set's directory; empty = skip this task")
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
    parser.add_argument("--configs", type=Path, default=Path("project/configs"))
    parser.add_argument("--corpus", type=Path, default=Path("corpus"))
    parser.add_argument("--training", type=Path, default=Path("training"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics"))
    args = parser.parse_args(argv)

    spec = TASKS[args.task]
    marker = args.metrics / "optional" / f"{args.task}.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    if not args.data_dir.strip():
        marker.write_text(json.dumps(skip(args.task, args.metrics), indent=2) + "\n", encoding="utf8")
        print(f"{args.task}: skipped (set its data directory variable to run it)")
        return
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        sys.exit(f"error: unknown variants {unknown}; expected some of {list(VARIANTS)}")

    data_dir = Path(args.data_dir)
    corpus = args.corpus / args.task
    splits = {}
    try:
        for split in ("train", "dev"):
            source, target = data_dir / spec[split], corpus / f"{split}.spacy"
            if spec["kind"] == "ner":
                splits[split] = convert_ner("conll", source, target, args.max_docs)
            else:
                splits[split] = convert_sst5(source, target, args.max_docs)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"error: {args.task}: {err}")

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
        scores = args.metrics / "eval" / f"{name}.json"
        run(
            [
                "-m",
                "spacy",
                "evaluate",
                str(output / "model-best"),
                str(corpus / "dev.spacy"),
                "--output",
                str(scores),
                "--per-component",
                "--gpu-id",
                str(args.gpu_id),
            ],
            args.threads,
        )
        runs.append(
            {
                "variant": variant,
                "model": str(output / "model-best"),
                "scores": str(scores),
                "wall_time_s": round(wall, 2),
            }
        )
    record = {"task": args.task, "skipped": False, "data_dir": str(data_dir), "sentences": splits, "runs": runs}
    marker.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    print(f"{args.task}: {len(runs)} runs evaluated on dev")


if __name__ == "__main__":
    main()
