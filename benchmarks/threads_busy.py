"""Words/s of the shipped pipe by threads setting, on a quiet machine and on a busy one, in the same run.

    python benchmarks/threads_busy.py [--busy 2] [--words 3000] [--rounds 3] [--runtimes torch,onnxruntime]
    python benchmarks/threads_busy.py --settings default,1,all,passive --busy 4 --pin --output results/threads.jsonl
    python benchmarks/threads_busy.py --smoke

The pipe is the README's, `spacy.blank("en")` + sentencizer + elmo (the shipped model, en_elmo_small; for
runtime onnxruntime its graph, exported once at the start), over Gutenberg paragraphs. Each measurement is
a fresh process (OpenMP reads its settings once, as torch is imported), started from this environment less
its OMP_*/GOMP_*/KMP_* variables. A setting:

    default  as shipped (n_threads = 0)
    1        n_threads = 1
    all      n_threads = every usable CPU: the default before issue 49 (torch's OpenMP threads spinning at
             barriers, as its own default, as ONNX Runtime's sessions do)
    passive  every usable CPU, threads that sleep at once when out of work: torch with OMP_WAIT_POLICY=PASSIVE
             (set before torch is imported), ONNX Runtime with session.intra_op.allow_spinning = 0

Busy: `--busy N` processes (0: one per usable CPU), each a pure-Python busy loop, free to move between CPUs
as other users' processes are (`--pin`: each pinned to one CPU in turn, a milder load for spinning threads),
run while the busy measurements run. Quiet: none, other users' work on a shared host aside (the load average
is recorded; `--nice N`, negative as root, runs the measurements and the busy loops at that priority, so that
others' work takes little from them, though `default` still sees it and fits its threads to it).

A round measures every setting once, quiet and busy; a setting's words/s is its best round. One JSON line
per runtime, load and setting: words/s, its ratio to 1 thread and to the better of 1 and all on that load,
every round's words/s and the ratio of the medians to 1 thread's (spinning threads' slow runs come by chance),
the threads the biLM ran with (torch: as seen at each forward), the CPUs the process used; the machine
(lscpu's model name) and the date.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from statistics import median
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
SETTINGS = ("default", "1", "all", "passive")
OPENMP_VARIABLES = ("OMP_", "GOMP_", "KMP_")
ALLOW_SPINNING = "session.intra_op.allow_spinning"
BUSY_LOOP = "import os, sys\nif sys.argv[1:]:\n    os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def machine_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        if line.strip().lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def affinity() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


# --- one measurement, in a process of its own -------------------------------------------------------------


def worker(setting: str, runtime: str, words: int, onnx_file: str, passes: int) -> None:
    """Time `passes` passes of nlp.pipe after a warm-up; print the best as one JSON line."""
    import spacy

    from pipe_throughput import load_texts

    n_threads = {"default": 0, "1": 1}.get(setting, len(affinity()))
    model: dict[str, object] = {"n_threads": n_threads}
    if runtime == "onnxruntime":
        model.update(runtime="onnxruntime", path=onnx_file)
        if setting == "passive":
            sleeping_onnxruntime()
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    elmo: Any = nlp.add_pipe("elmo", config={"model": model})
    texts = load_texts(words)
    threads: Counter[int] = Counter()
    if runtime == "torch":
        import torch

        elmo.bilm.register_forward_pre_hook(lambda *_: threads.update([torch.get_num_threads()]))
    list(nlp.pipe(texts[:8]))  # warm-up and loading
    best, n_words, cpus_used = float("inf"), 0, 0.0
    for _ in range(passes):
        threads.clear()
        start, cpu = time.perf_counter(), time.process_time()
        n_words = sum(len(doc) for doc in nlp.pipe(texts, batch_size=64))
        wall = time.perf_counter() - start
        if wall < best:
            best, cpus_used = wall, (time.process_time() - cpu) / wall
    seen: dict[str, Any] = {"omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}
    if runtime == "torch":
        seen["threads_seen"] = dict(sorted(threads.items()))
    else:
        options = elmo.model.shims[0]._model.session().get_session_options()  # the OnnxRunner's session
        seen["threads_seen"] = options.intra_op_num_threads
        try:
            seen["ort_allow_spinning"] = options.get_session_config_entry(ALLOW_SPINNING)
        except Exception:  # not set: ONNX Runtime's default (spinning)
            seen["ort_allow_spinning"] = "default"
    print(json.dumps({"words_per_s": n_words / best, "words": n_words, "cpus_used": round(cpus_used, 2), **seen}))


def sleeping_onnxruntime() -> None:
    """Every ONNX Runtime session of this process: pool threads sleep at once when out of work."""
    import onnxruntime

    original = onnxruntime.InferenceSession.__init__

    def sleeping(self: Any, model: Any, options: Optional[Any] = None, *args: Any, **kwargs: Any) -> None:
        if options is not None:
            options.add_session_config_entry(ALLOW_SPINNING, "0")
        original(self, model, options, *args, **kwargs)

    onnxruntime.InferenceSession.__init__ = sleeping


# --- the driver -------------------------------------------------------------------------------------------


def environment(setting: str, runtime: str = "torch") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(OPENMP_VARIABLES)}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if setting == "passive" and runtime == "torch":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


def niced(nice: int) -> Any:
    return (lambda: os.nice(nice)) if nice else None


def measure(setting: str, runtime: str, args: argparse.Namespace, onnx_file: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", setting, "--runtime", runtime, "--words", str(args.words)]
    command += ["--onnx-file", onnx_file, "--passes", str(args.passes)]
    done = subprocess.run(
        command,
        env=environment(setting, runtime),
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=1800,
        preexec_fn=niced(args.nice),
    )
    if done.returncode != 0:
        raise RuntimeError(f"{setting} {runtime}: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load_average"] = os.getloadavg()[0]
    return result


@contextmanager
def busy(n_processes: int, pin: bool, nice: int) -> Iterator[None]:
    """`n_processes` pure-Python busy loops while the block runs; `pin`: each pinned to one CPU in turn."""
    cpus = affinity()
    pins = [[str(cpus[i % len(cpus)])] if pin else [] for i in range(n_processes)]
    loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, *p], preexec_fn=niced(nice)) for p in pins]
    try:
        time.sleep(0.5)
        yield
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def export_graph(directory: str) -> str:
    path = str(Path(directory) / "en_elmo_small.onnx")
    command = [sys.executable, "-m", "spacy_elmo", "export", "en_elmo_small", path]
    subprocess.run(command, env=environment("default"), check=True, capture_output=True, timeout=900)
    return path


def report(args: argparse.Namespace, results: dict[tuple[str, str, str], dict[str, Any]], n_busy: int) -> None:
    from common import emit  # not in a worker: it imports torch

    record = {
        "bench": "threads_busy",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": f"{machine_model()}, {os.cpu_count()} cores, {len(affinity())} usable",
        "busy_processes": n_busy,
        "busy_pinned": args.pin,
        "nice": args.nice,
        "rounds": args.rounds,
    }
    for (runtime, load, setting), result in results.items():
        rate = result["words_per_s"]
        one = results.get((runtime, load, "1"), {}).get("words_per_s")
        ones = results.get((runtime, load, "1"), {}).get("rounds_words_per_s")
        best = max(results.get((runtime, load, s), {}).get("words_per_s", 0.0) for s in ("1", "all"))
        emit(
            {
                **record,
                "runtime": runtime,
                "load": load,
                "setting": setting,
                "words_per_s": round(rate, 1),
                "vs_1_thread": round(rate / one, 3) if one else None,
                "vs_best_of_1_all": round(rate / best, 3) if best else None,
                "median_vs_1_thread": round(median(result["rounds_words_per_s"]) / median(ones), 3) if ones else None,
                **{k: v for k, v in result.items() if k != "words_per_s"},
            },
            args.output,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default="default,1,all", help=f"comma-separated: {','.join(SETTINGS)}")
    parser.add_argument("--runtimes", default="torch,onnxruntime", help="comma-separated: torch, onnxruntime")
    parser.add_argument("--loads", default="quiet,busy", help="comma-separated: quiet, busy")
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes (0: one per usable CPU)")
    parser.add_argument("--pin", action="store_true", help="pin each busy loop to one CPU (in turn)")
    parser.add_argument("--nice", type=int, default=0, help="run measurements and busy loops at this priority")
    parser.add_argument("--words", type=int, default=3000, help="words of text a pass")
    parser.add_argument("--passes", type=int, default=2, help="timed passes a measurement (its best counts)")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each setting and load (the best)")
    parser.add_argument("--output", default="", help="append JSON lines to this file too")
    parser.add_argument("--smoke", action="store_true", help="a tiny size that runs in seconds on a CPU")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--runtime", default="torch", help=argparse.SUPPRESS)
    parser.add_argument("--onnx-file", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.runtime, args.words, args.onnx_file, args.passes)
        return
    if args.smoke:
        args.words, args.passes, args.rounds, args.runtimes, args.settings = 200, 1, 1, "torch", "default,1"
    settings = args.settings.split(",")
    if set(settings) - set(SETTINGS):
        parser.error(f"--settings: choose from {','.join(SETTINGS)}")
    n_busy = args.busy or len(affinity())
    results: dict[tuple[str, str, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        onnx_file = export_graph(tmp) if "onnxruntime" in args.runtimes.split(",") else ""
        for _ in range(args.rounds):
            for load in args.loads.split(","):
                with busy(n_busy, args.pin, args.nice) if load == "busy" else nullcontext():
                    for runtime in args.runtimes.split(","):
                        for setting in settings:
                            result = measure(setting, runtime, args, onnx_file)
                            key = (runtime, load, setting)
                            rounds = results.get(key, {}).get("rounds_words_per_s", [])
                            if result["words_per_s"] > results.get(key, {}).get("words_per_s", 0.0):
                                results[key] = result
                            results[key]["rounds_words_per_s"] = [*rounds, round(result["words_per_s"], 1)]
    report(args, results, n_busy)


if __name__ == "__main__":
    main()
