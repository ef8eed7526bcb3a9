"""Peak resident memory of `spacy elmo embed` on one very long line, windowed and not; with `--mode engines`,
a corpus's tokens/s through `embed` and through the Spark and Ray engines.

    python benchmarks/embed_memory.py [--model en_elmo_small] [--tokens 1000,10000,50000] [--layers all]
    python benchmarks/embed_memory.py --mode engines [--model en_elmo_small] [--lines 2000] [--repeats 3]

For each length, one line of that many tokens of Gutenberg text ($SPACY_ELMO_LONG_TEXT or
../shared/data/gutenberg-en/valid.txt.gz) is embedded by a fresh `python -m spacy_elmo embed` process,
once with the default windows (what `embed` does) and once with `--window-size` above the line's length
(the whole line through the biLM at once, as `embed` did before it windowed lines). The peak RSS is the
child's own (`os.wait4`'s ru_maxrss), so each number is one process from start to finish, model
loading included.
"""

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import SMOKE_HELP, describe_machine, emit

ROOT = Path(__file__).parent.parent
DEFAULT_TEXT = os.environ.get("SPACY_ELMO_LONG_TEXT", str(ROOT.parent / "shared/data/gutenberg-en/valid.txt.gz"))


def words(path: Path, n: int, smoke: bool = False) -> list[str]:
    if smoke:  # no data files needed
        return [("the", "bank", "raised", "its", "rates", ".")[i % 6] for i in range(n)]
    out: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            out.extend(line.split())
            if len(out) >= n:
                return out[:n]
    raise SystemExit(f"{path} has fewer than {n} tokens")


def embed_peak(model: str, line: Path, layers: str, window_size: int, threads: int) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one `embed` process."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable, "-m", "spacy_elmo", "embed", model, str(line), str(Path(tmp) / "out.hdf5"),
            "--layers", layers, "--window-size", str(window_size), "--threads", str(threads),
        ]  # fmt: skip
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        if status != 0:
            raise SystemExit(f"embed failed ({status}): {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
    return usage.ru_maxrss / 1024, seconds


def corpus(path: Path, n_lines: int, smoke: bool) -> list[str]:
    """The first `n_lines` non-blank lines of the Gutenberg text (generated ones with --smoke)."""
    if smoke:
        return [" ".join(words(path, 5 + i % 30, smoke=True)) for i in range(n_lines)]
    out: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                out.append(line.strip())
                if len(out) == n_lines:
                    return out
    raise SystemExit(f"{path} has fewer than {n_lines} non-blank lines")


def embed_run(model: str, text: Path, out: Path, layers: str, workers: int) -> None:
    command = [
        sys.executable, "-m", "spacy_elmo", "embed", model, str(text), str(out),
        "--layers", layers, "--workers", str(workers), "--threads", "1",
    ]  # fmt: skip
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"embed failed: {done.stderr[-2000:]}")


def engines(args: argparse.Namespace) -> None:
    """tokens/s of one corpus through `embed` (1 and 2 processes) and the Spark and Ray engines (1 and 2
    workers), interleaved: each repeat runs every configuration once, in the same order. Engines are started
    once, before timing (Spark: a local[2] session, parallelism by partitions; Ray: 2 CPUs); every timed run
    includes what a job costs its user then: `embed` is a fresh process (as a user runs it; forking this one,
    which runs Spark's and Ray's threads, could hang), it and Ray load the model in each run's workers,
    Spark's reused Python workers keep it. The overhead ratio is embed's tokens/s over the engine's, same workers."""
    import statistics

    import pyarrow

    from spacy_elmo.embed import EmbedSettings
    from spacy_elmo.engines import ray as ray_engine
    from spacy_elmo.engines import spark as spark_engine

    lines = corpus(Path(args.text), args.lines, args.smoke)
    n_tokens = sum(len(line.split()) for line in lines)
    settings = EmbedSettings(model=args.model, layers=args.layers, n_threads=1)
    table = pyarrow.table({"id": list(range(len(lines))), "text": lines})
    spark = None
    if shutil.which("java") or os.environ.get("JAVA_HOME"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        frame = spark.createDataFrame(table.to_pandas())
    else:
        print("no Java runtime (no `java` on PATH, no JAVA_HOME): Spark is left out", file=sys.stderr)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "corpus.txt"
        text.write_text("\n".join(lines) + "\n", encoding="utf-8")
        runs = {
            "embed": lambda n, k: embed_run(args.model, text, Path(tmp) / f"out{n}-{k}.hdf5", args.layers, n),
            "spark": lambda n, k: spark_engine.with_elmo(frame.repartition(n), settings).write.format("noop")
            .mode("overwrite").save(),
            "ray": lambda n, k: sum(
                batch.num_rows for batch in ray_engine.with_elmo(
                    ray.data.from_arrow([table.slice(i, 64) for i in range(0, table.num_rows, 64)]),
                    settings, workers=n, batch_rows=64,
                ).iter_batches(batch_format="pyarrow", batch_size=None)
            ),
        }  # fmt: skip
        if spark is None:
            del runs["spark"]
        for name in runs.keys() - {"embed"}:  # the engines' first job (JVM, worker imports) is not timed
            runs[name](1, -1)
        seconds: dict[tuple[str, int], list[float]] = {}
        for repeat in range(args.repeats):
            for name, run in runs.items():
                for workers in (1, 2):
                    start = time.perf_counter()
                    run(workers, repeat)
                    seconds.setdefault((name, workers), []).append(time.perf_counter() - start)
    ray.shutdown()
    if spark is not None:
        spark.stop()
    for (name, workers), times in seconds.items():
        median = statistics.median(times)
        embed_rate = n_tokens / statistics.median(seconds[("embed", workers)])
        emit(
            {
                "bench": "embed_engines",
                "model": args.model,
                "engine": name,
                "workers": workers,
                "lines": len(lines),
                "tokens": n_tokens,
                "layers": args.layers,
                "tokens_per_s": round(n_tokens / median, 1),
                "overhead_vs_embed": round(embed_rate / (n_tokens / median), 2),
                "seconds": [round(t, 2) for t in times],
                "date": time.strftime("%Y-%m-%d"),
                "device": describe_machine()["device"],
            },
            args.output,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="en_elmo_small")
    parser.add_argument("--tokens", default="1000,10000,50000")
    parser.add_argument("--layers", default="all")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--unwindowed", default="1", help="also run without windows (1) or not (0)")
    parser.add_argument("--output", default="")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP + "; the test fixture model, generated text")
    parser.add_argument("--mode", choices=("memory", "engines"), default="memory")
    parser.add_argument("--lines", type=int, default=2000, help="--mode engines: the corpus's lines")
    parser.add_argument("--repeats", type=int, default=3, help="--mode engines: runs of each configuration")
    args = parser.parse_args()
    if args.smoke:
        args.model, args.tokens = str(Path(__file__).resolve().parent.parent / "tests/fixtures/elmo-fixture"), "200"
        args.lines, args.repeats = 40, 1
    if args.mode == "engines":
        engines(args)
        return
    lengths = [int(n) for n in args.tokens.split(",")]
    text = words(Path(args.text), max(lengths), args.smoke)
    with tempfile.TemporaryDirectory() as tmp:
        for n in lengths:
            line = Path(tmp) / f"line{n}.txt"
            line.write_text(" ".join(text[:n]) + "\n", encoding="utf-8")
            modes = [("windowed (default 128/16)", 128)]
            if args.unwindowed == "1":
                modes.append(("whole line (no windows)", n + 1))
            for mode, window_size in modes:
                peak, seconds = embed_peak(args.model, line, args.layers, window_size, args.threads)
                emit(
                    {
                        "bench": "embed_memory",
                        "model": args.model,
                        "tokens": n,
                        "layers": args.layers,
                        "mode": mode,
                        "peak_rss_mb": round(peak, 1),
                        "seconds": round(seconds, 1),
                        "date": time.strftime("%Y-%m-%d"),
                        "device": describe_machine()["device"],
                    },
                    args.output,
                )


if __name__ == "__main__":
    main()
