"""The workflow's steps that run a table: the biLM on each held-out text, each task in each variant.

    python project/scripts/tasks.py perplexity gutenberg_test wikitext_valid --threads 1
    python project/scripts/tasks.py train ner textcat --epochs ner=10 --epochs textcat=3 --threads 1
    python project/scripts/tasks.py evaluate ner textcat --threads 1

`perplexity` runs `spacy_elmo evaluate` of training/bilm/model on corpus/heldout/NAME.txt into
metrics/perplexity/NAME.json (its wall time in metrics/timing/perplexity_NAME.json). `train` runs
`spacy train` for each task and variant (the table in common.py) into training/<task>-<variant> (with
timing.json); `evaluate` runs `spacy evaluate --per-component` on the task's test split into
metrics/eval/<task>-<variant>.json (with .timing.json beside it).
"""

import argparse
from typing import Optional

from common import TASKS, VARIANTS, add_run_options, evaluate, exit_on, timed, train


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("perplexity", "train", "evaluate"))
    parser.add_argument("names", nargs="+", help="held-out texts (perplexity) or tasks: " + ", ".join(TASKS))
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    parser.add_argument(
        "--epochs", action="append", default=[], metavar="TASK=N", help="per task (default 0: no limit)"
    )
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
    for task in (TASKS[name] for name in args.names):
        for variant in variants:
            name = f"{task.name}-{variant}"
            if args.step == "train":
                train(task, variant, epochs.get(task.name, 0), args)
            else:
                output = args.metrics / "eval" / f"{name}.json"
                data = args.corpus / task.name / f"{task.eval_split}.spacy"
                evaluate(name, data, output, args, timing=output.with_suffix(".timing.json"))


if __name__ == "__main__":
    main()
