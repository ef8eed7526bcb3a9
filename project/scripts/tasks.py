"""The workflow's steps that run the table in common.py: the tasks' data, each task in each variant, the
biLM on each held-out text.

    python project/scripts/tasks.py convert --max-docs 0 --mr-seed 0 --conll-dir=/path/to/conll2003
    python project/scripts/tasks.py train --epochs ner=10 textcat=3 conll=10 sst5=6 --threads 1
    python project/scripts/tasks.py evaluate --threads 1
    python project/scripts/tasks.py perplexity gutenberg_test wikitext_valid --threads 1

`convert` writes corpus/<task>/{train,dev,test}.spacy for every task (default: all of them). An optional
task (CoNLL-2003, SST-5) is converted only when its data directory is given; without one its
corpus/<task>/ is left empty, so that `train` and `evaluate` skip it and `evaluate` removes its earlier
scores: the results table never shows stale numbers. `train` runs `spacy train` for each task and
variant into training/<task>-<variant> (with timing.json); `evaluate` runs `spacy evaluate
--per-component` on the task's evaluation split into metrics/eval/<task>-<variant>.json (with
.timing.json beside it), and an optional task's test file, when there is one, into
<task>-<variant>.test.json. `perplexity` runs `spacy_elmo evaluate` of training/bilm/model on
corpus/heldout/NAME.txt into metrics/perplexity/NAME.json (its wall time in
metrics/timing/perplexity_NAME.json).

The optional tasks need no pretraining with the variants that do not use the project's biLM:

    python project/scripts/tasks.py convert conll --conll-dir=DIR --max-train-docs 2000
    python project/scripts/tasks.py train conll --variants baseline,elmo_shipped --epochs conll=10
    python project/scripts/tasks.py evaluate conll --variants baseline,elmo_shipped
"""

import argparse
import shutil
import sys
from pathlib import Path
from typing import Optional

from common import TASKS, VARIANTS, Task, add_run_options, evaluate, exit_on, timed, train
from convert_ner import convert as convert_ner
from convert_textcat import convert_mr, convert_sst5


def convert(task: Task, source: str, output: Path, max_docs: int, max_train_docs: int, mr_seed: int) -> dict:
    """The task's data in `source` as output/<split>.spacy, `output` emptied first; the documents of each
    split. No `source` (an optional task not given): nothing written. `max_docs` caps every split,
    `max_train_docs` the training split of the tasks read from files."""
    shutil.rmtree(output, ignore_errors=True)
    output.mkdir(parents=True)
    if not source:
        return {}
    if task.format == "mr":
        return convert_mr(Path(source), output, mr_seed, limit=max_docs)
    counts = {}
    for split, name in task.files:
        path = Path(source) / name
        if split == "test" and not task.required and not path.exists():
            continue  # no test file: dev scores only
        cap = max_docs
        if split == "train" and max_train_docs:
            cap = min(cap, max_train_docs) if cap else max_train_docs
        target = output / f"{split}.spacy"
        if task.component == "ner":
            counts[split] = convert_ner(task.format, path, target, cap)
        else:
            counts[split] = convert_sst5(path, target, cap)
    return counts


def converted(task: Task, corpus: Path) -> bool:
    """Whether the task runs: always for the required tasks, for an optional one when its data was given."""
    return task.required or (corpus / task.name / "train.spacy").is_file()


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("convert", "train", "evaluate", "perplexity"))
    parser.add_argument(
        "names", nargs="*", help="held-out texts (perplexity) or tasks (default: all): " + ", ".join(TASKS)
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    parser.add_argument(
        "--epochs", action="extend", nargs="+", default=[], metavar="TASK=N", help="per task (default 0: no limit)"
    )
    for task in TASKS.values():
        if not task.required:
            files = ", ".join(name for _, name in task.files)
            parser.add_argument(f"--{task.name}-dir", default="", help=f"{task.dataset}: {files}; '' = skip it")
    parser.add_argument("--max-docs", type=int, default=0, help="convert: cap every split (0 = all)")
    parser.add_argument("--max-train-docs", type=int, default=0, help="convert: cap the training split only")
    parser.add_argument("--mr-seed", type=int, default=0, help="convert: the seed of MR's 80/10/10 split")
    add_run_options(parser)
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if set(variants) - set(VARIANTS):
        parser.error(f"unknown variants {sorted(set(variants) - set(VARIANTS))}; expected some of {list(VARIANTS)}")
    with exit_on(ValueError):
        epochs = {task: int(n) for task, _, n in (item.partition("=") for item in args.epochs)}
    if args.step == "perplexity":
        for name in args.names:
            command = ["python", "-m", "spacy_elmo", "evaluate", str(args.training / "bilm" / "model")]
            command += [
                str(args.corpus / "heldout" / f"{name}.txt"),
                "--output",
                f"{args.metrics}/perplexity/{name}.json",
            ]
            timed(args.metrics / "timing" / f"perplexity_{name}.json", command, args.threads)
        return
    if set(args.names) - set(TASKS):
        parser.error(f"unknown tasks {sorted(set(args.names) - set(TASKS))}; expected some of {list(TASKS)}")
    tasks = [TASKS[name] for name in args.names or TASKS]
    if args.step == "train" and "elmo" in variants and not Path(args.elmo).exists():
        sys.exit(
            f"error: variant 'elmo' needs the project's biLM at {args.elmo} (run the pretraining and adaptation "
            "steps first), or leave it out: --variants baseline,elmo_shipped"
        )
    for task in tasks:
        if args.step == "convert":
            source = task.source or getattr(args, f"{task.name}_dir").strip()
            output = args.corpus / task.name
            try:
                counts = convert(task, source, output, args.max_docs, args.max_train_docs, args.mr_seed)
            except (FileNotFoundError, ValueError) as err:
                sys.exit(f"error: {task.name}: {err}")
            print(f"{task.name}: {counts or f'skipped (no --{task.name}-dir)'} -> {output}")
            continue
        if not converted(task, args.corpus):
            for stale in (args.metrics / "eval").glob(f"{task.name}-*.json"):  # an earlier run's scores
                stale.unlink()
            print(f"{task.name}: skipped (no data converted)")
            continue
        for variant in variants:
            name = f"{task.name}-{variant}"
            if args.step == "train":
                train(task, variant, epochs.get(task.name, 0), args)
                continue
            scored = {task.eval_split: args.metrics / "eval" / f"{name}.json"}
            test_output = args.metrics / "eval" / f"{name}.test.json"
            if task.eval_split == "dev" and (args.corpus / task.name / "test.spacy").is_file():
                scored["test"] = test_output  # an optional task given a test file
            elif test_output.exists():
                test_output.unlink()  # from an earlier run that had one
            for split, output in scored.items():
                data = args.corpus / task.name / f"{split}.spacy"
                evaluate(name, data, output, args, timing=output.with_suffix(".timing.json"))


if __name__ == "__main__":
    main()
