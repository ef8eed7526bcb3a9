"""Two versions of spacy_elmo, the same biLM benchmark, interleaved in one run: tokens/s new / old per shape.

    python benchmarks/compare_versions.py OLD_CHECKOUT [--rounds 3] [--output FILE.jsonl] \
        [-- ARGS FOR bilm_throughput.py, e.g. --configs small --batch-sizes 1 --precision fp32,bf16,int8]

Why: "nothing slower than before" and "2x the speed of today's path" are ratios between two versions of
the code on a shared, noisy host; measured minutes apart they say more about the host than the code.
Each round runs each version's own `benchmarks/bilm_throughput.py` (its `common.matmul_rate` measures
the kernels that version runs) with that version's package first on PYTHONPATH, old then new; per
(configuration, batch size, precision) the best tokens/s of each version over the rounds, and their
ratio, are printed and written as JSON lines.
OLD_CHECKOUT: a directory holding the old `spacy_elmo` (e.g. `git worktree add /tmp/old COMMIT`).
`--smoke` runs one round at the scripts' smoke size (the smallest shape where the old script has none).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import SMOKE_HELP, emit

HERE = Path(__file__).resolve().parent


def run_once(pythonpath: Path, args: list[str]) -> list[dict[str, Any]]:
    """The JSON lines of one `bilm_throughput.py` run with `pythonpath` first on the path."""
    benchmarks = pythonpath / "benchmarks"
    env = dict(os.environ, PYTHONPATH=f"{pythonpath}{os.pathsep}{benchmarks}")
    done = subprocess.run(
        [sys.executable, str(benchmarks / "bilm_throughput.py"), *args],
        env=env,
        cwd=pythonpath,
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args, rest = parser.parse_known_args()
    throughput_args = [a for a in rest if a != "--"]
    versions = {"old": args.old.resolve(), "new": HERE.parent}
    if args.smoke:  # the scripts' own smoke size where both versions' scripts have one, else the smallest shape
        args.rounds = 1
        scripts = [path / "benchmarks" / "bilm_throughput.py" for path in versions.values()]
        both = all("--smoke" in script.read_text(encoding="utf-8") for script in scripts)
        smallest = "--configs small --batch-sizes 2 --length 5 --min-seconds 0 --precision fp32"
        throughput_args = ["--smoke"] if both else smallest.split()
    best: dict[tuple[Any, ...], dict[str, float]] = {}
    for round_index in range(args.rounds):
        for name, path in versions.items():
            for record in run_once(path, throughput_args):
                if "tokens_per_s" not in record:
                    continue
                key = (record["config"], record["batch_size"], record["precision"])
                rate = best.setdefault(key, {}).get(name, 0.0)
                best[key][name] = max(rate, float(record["tokens_per_s"]))
            print(f"round {round_index + 1}/{args.rounds}: {name} done", file=sys.stderr, flush=True)
    print("| config | batch | precision | old tokens/s | new tokens/s | new / old |")
    print("|---|---|---|---|---|---|")
    for (config, batch, precision), rates in best.items():
        ratio = rates["new"] / rates["old"]
        emit(
            {
                "bench": "compare_versions",
                "old": str(args.old),
                "config": config,
                "batch_size": batch,
                "precision": precision,
                "old_tokens_per_s": rates["old"],
                "new_tokens_per_s": rates["new"],
                "ratio": round(ratio, 3),
            },
            args.output,
        )
        print(f"| {config} | {batch} | {precision} | {rates['old']:,.0f} | {rates['new']:,.0f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
