"""Train and test one task config under several seeds: is a difference more than seed noise?

    python project/scripts/seed_study.py metrics/seeds/mr.json --seeds 0 1 2 3 \
        --data corpus/textcat \
        --variant baseline project/configs/textcat_baseline.cfg \
        --variant elmo project/configs/textcat_elmo.cfg training/bilm-domain/model \
        --variant elmo-shipped project/configs/textcat_elmo.cfg "" --training.max_epochs 3

A variant is NAME CONFIG [ELMO] (ELMO: the biLM for --paths.elmo; "" = the shipped model). Each
(variant, seed) is trained with `spacy train` (the seed as --system.seed; unknown arguments go to
every `spacy train`) and scored with `spacy evaluate` on the test split, both in this process (logs in
WORK_DIR/NAME-seedS/). The output JSON has every run and, per variant, the mean and sample standard
deviation of the task's metric; a markdown table is printed.
"""

import argparse
import json
import statistics
from pathlib import Path

from common import METRICS, full_config, run


def task_of(config: Path) -> str:
    """The pipe a config trains (a key of common.METRICS)."""
    text = config.read_text(encoding="utf-8")
    for component in METRICS:
        if f'factory = "{component}"' in text:
            return component
    raise SystemExit(f"{config}: neither a ner nor a textcat pipeline")


def train_and_test(
    config: Path, seed: int, out: Path, splits: dict[str, str], extra: list[str], threads: int
) -> tuple[float, float]:
    metric, _ = METRICS[task_of(config)]
    out.mkdir(parents=True, exist_ok=True)
    train = ["python", "-m", "spacy", "train", str(config), "--output", str(out)]
    train += ["--paths.train", splits["train"], "--paths.dev", splits["dev"], "--system.seed", str(seed)]
    run(train + extra, threads, out / "train.log")
    scores = out / "test.json"
    run(
        ["python", "-m", "spacy", "evaluate", str(out / "model-best"), splits["test"], "--output", str(scores)],
        threads,
        out / "evaluate.log",
    )
    dev = json.loads((out / "model-best" / "meta.json").read_text())["performance"][metric]
    test = json.loads(scores.read_text())[metric]
    return 100.0 * float(dev), 100.0 * float(test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--data", type=Path, help="a directory with train.spacy, dev.spacy and test.spacy")
    for split in ("train", "dev", "test"):
        parser.add_argument(f"--{split}", help=f"the {split} file (default: DATA/{split}.spacy)")
    parser.add_argument("--variant", nargs="+", action="append", required=True, help="NAME CONFIG [ELMO]")
    parser.add_argument("--threads", type=int, default=1, help="math threads per run (0 = the defaults)")
    parser.add_argument("--work-dir", type=Path, default=Path("training/seeds"))
    args, extra = parser.parse_known_args()
    splits = {
        s: getattr(args, s) or (str(args.data / f"{s}.spacy") if args.data else "") for s in ("train", "dev", "test")
    }
    if not all(splits.values()):
        parser.error("give --data, or --train, --dev and --test")
    runs, summary = [], {}
    for variant in args.variant:
        if len(variant) not in (2, 3):
            parser.error(f"--variant takes NAME CONFIG [ELMO], got {variant}")
        name, config_path = variant[0], variant[1]
        config = full_config(Path(config_path), args.work_dir / f"{name}.cfg")
        overrides = list(extra) + ([f"--paths.elmo={variant[2]}"] if len(variant) == 3 else [])
        tests = []
        for seed in args.seeds:
            dev, test = train_and_test(
                config, seed, args.work_dir / f"{name}-seed{seed}", splits, overrides, args.threads
            )
            runs.append({"variant": name, "config": config_path, "seed": seed, "dev": dev, "test": test})
            tests.append(test)
            print(f"{name} seed {seed}: dev {dev:.2f} test {test:.2f}", flush=True)
        summary[name] = {
            "mean": statistics.mean(tests),
            "sd": statistics.stdev(tests) if len(tests) > 1 else 0.0,
            "n": len(tests),
            "metric": METRICS[task_of(config)][1],
        }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"seeds": args.seeds, "runs": runs, "summary": summary}, indent=2) + "\n")
    print("| variant | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean | sd |")
    print("|---|" + "---|" * (len(args.seeds) + 2))
    for name, stats in summary.items():
        cells = [f"{r['test']:.2f}" for r in runs if r["variant"] == name]
        print(f"| {name} | " + " | ".join(cells) + f" | {stats['mean']:.2f} | {stats['sd']:.2f} |")


if __name__ == "__main__":
    main()
