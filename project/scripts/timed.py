"""Run a command and record its wall time (the results table reports training time per run).

    python project/scripts/timed.py [--threads N] training/ner-baseline/timing.json python -m spacy train ...

--threads N caps the command's math libraries (OpenMP, MKL, OpenBLAS, and through them PyTorch)
at N threads: on a small shared machine one thread per process is often several times faster than
threads fighting over the same cores. 0 leaves the libraries' defaults.

The command runs with this interpreter when it starts with `python`, as weasel does for its own
commands, so the timed run uses the project's environment. The exit status is passed through and
the timing file is only written when the command succeeds.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def main(argv: Optional[list[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = os.environ.copy()
    if args[:1] == ["--threads"]:
        if len(args) < 2 or not args[1].isdigit():
            sys.exit("timed.py: --threads needs a number (0 = the libraries' defaults)")
        if int(args[1]) > 0:
            for name in THREAD_VARIABLES:
                env[name] = args[1]
        args = args[2:]
    if len(args) < 2:
        sys.exit("usage: timed.py [--threads N] OUTPUT.json COMMAND [ARGS...]")
    output, command = Path(args[0]), args[1:]
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    started = time.time()
    result = subprocess.run(command, env=env)
    wall = time.time() - started
    if result.returncode != 0:
        return result.returncode
    output.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": command[1:] if command[0] == sys.executable else command, "wall_time_s": round(wall, 2)}
    output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    print(f"wall time {wall:.1f}s -> {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
