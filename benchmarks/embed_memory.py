"""Peak resident memory of `spacy elmo embed` on one very long line, windowed and not.

    python benchmarks/embed_memory.py [--model en_elmo_small] [--tokens 1000,10000,50000] [--layers all]

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
    args = parser.parse_args()
    if args.smoke:
        args.model, args.tokens = str(Path(__file__).resolve().parent.parent / "tests/fixtures/elmo-fixture"), "200"
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
