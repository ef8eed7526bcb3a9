"""Repeat the two-process DDP test N times: how often does it pass, and how long does it take?

A test that fails once in twenty runs costs a whole CI run; one pass proves little. This runs the
two-process DDP test of tests/pretrain/test_distributed.py (the real test, its assertions
included) in a fresh pytest process each time, one JSON line per run, then a summary line with the
pass count, the wall times and the tail of every failure's output.

  python benchmarks/ddp_loop.py                    # 50 runs
  python benchmarks/ddp_loop.py --runs 10 --busy 2 # 10 runs beside 2 busy-looping processes (a loaded machine)
  python benchmarks/ddp_loop.py --tests tests/pretrain  # the whole pretraining suite each time
"""

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DDP_TEST = "tests/pretrain/test_distributed.py::test_two_process_gloo_ddp_matches_one_process_on_the_same_global_batch"


def _spin() -> None:
    while True:
        pass


def run_once(tests: list[str], timeout_s: float, tail: int) -> dict[str, object]:
    """One pytest process over `tests`; a timeout counts as a failure, not as an error of the loop."""
    start = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        rc, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        rc = -1
        parts = (p.decode(errors="replace") if isinstance(p, bytes) else (p or "") for p in (err.stdout, err.stderr))
        output = f"timed out after {timeout_s} s\n" + "".join(parts)
    return {
        "passed": rc == 0,
        "rc": rc,
        "wall_s": round(time.perf_counter() - start, 2),
        "tail": "" if rc == 0 else output[-tail:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--tests", nargs="+", default=[DDP_TEST], help="what each pytest process runs")
    parser.add_argument("--busy", type=int, default=0, help="busy-looping processes beside the runs (load)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one pytest process may take")
    parser.add_argument("--tail", type=int, default=4000, help="characters of a failure's output to keep")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    results = []
    start = time.perf_counter()
    try:
        for i in range(args.runs):
            result = run_once(args.tests, args.timeout, args.tail)
            results.append(result)
            print(json.dumps({"benchmark": "ddp_loop", "run": i + 1, **result}), flush=True)
    finally:
        for spinner in spinners:
            spinner.terminate()
    walls = [float(r["wall_s"]) for r in results]  # type: ignore[arg-type]
    print(
        json.dumps(
            {
                "benchmark": "ddp_loop",
                "summary": True,
                "tests": args.tests,
                "busy": args.busy,
                "runs": len(results),
                "passed": sum(bool(r["passed"]) for r in results),
                "total_s": round(time.perf_counter() - start, 1),
                "wall_s_min": min(walls),
                "wall_s_median": round(statistics.median(walls), 2),
                "wall_s_max": max(walls),
                "failures": [
                    {"run": i + 1, "rc": r["rc"], "tail": r["tail"]} for i, r in enumerate(results) if not r["passed"]
                ],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
