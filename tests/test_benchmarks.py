"""The maintained benchmarks (benchmarks/*.py): each runs at its smoke size, and uses the public API only,
so that a refactor which breaks one fails here rather than on the day someone measures."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
HELPERS = {"common.py"}
# each maintained script's smoke command (arguments after the script); {tmp} is a scratch directory
SMOKE = {
    "bilm_throughput.py": [["--smoke", "--entry", "runner", "--profile"]],
    "pipe_throughput.py": [["--smoke"]],
    "train_throughput.py": [["--smoke"]],
    "pipe_memory.py": [["--smoke"], ["--mode", "initialize", "--smoke"]],
    "embed_memory.py": [["--smoke"]],
    "output_parity.py": [
        ["dump", "--smoke", "{tmp}/a.npz"],
        ["dump", "--smoke", "{tmp}/b.npz"],
        ["compare", "{tmp}/a.npz", "{tmp}/b.npz"],
        ["exactness", "--models", "fixture", "--sentences", "3"],
    ],
    "compare_versions.py": [[str(ROOT), "--smoke"]],
    "threads_busy.py": [["--smoke"]],
}
# the package's own names and the modules its README teaches (`spacy_elmo.embed`, `spacy_elmo.engines.*`)
PUBLIC_MODULES = {
    "spacy_elmo",
    "spacy_elmo.bilm.options",
    "spacy_elmo.bilm.runner",
    "spacy_elmo.pretrain",
    "spacy_elmo.embed",
    "spacy_elmo.engines",
}


def maintained_scripts() -> set[str]:
    return {path.name for path in BENCHMARKS.glob("*.py")} - HELPERS


def test_every_maintained_script_has_a_smoke_command_and_there_are_at_most_nine():
    assert maintained_scripts() == set(SMOKE)
    # the scripts, and benchmarks/gpu/ as one tool; nine since threads_busy.py (threads under other load: its
    # own harness of fresh processes and busy loops, which no other script's measurements can share)
    assert len(SMOKE) + 1 <= 9


@pytest.mark.parametrize("name", sorted(HELPERS | set(SMOKE)))
def test_a_benchmark_imports_only_the_public_api(name):
    tree = ast.parse((BENCHMARKS / name).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    ours = {module for module in imported if module.split(".")[0] == "spacy_elmo"}
    # output_parity also reads older layouts, behind fallbacks; it and pipe_throughput write bilm-tf files
    fallbacks = {
        "output_parity.py": {"spacy_elmo.io.resolve", "spacy_elmo.loading", "spacy_elmo.io.hdf5"},
        "pipe_throughput.py": {"spacy_elmo.io.hdf5"},
    }.get(name, set())
    assert ours <= PUBLIC_MODULES | fallbacks


@pytest.mark.slow
def test_every_maintained_benchmark_runs_at_its_smoke_size(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # CPU only
    for name, commands in SMOKE.items():
        for arguments in commands:
            command = [sys.executable, str(BENCHMARKS / name), *(a.format(tmp=tmp_path) for a in arguments)]
            done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{name} {arguments}: {done.stderr[-3000:]}"
            if arguments[0] == "compare":
                assert " 0 differ" in done.stdout
            elif arguments[0] != "dump":
                records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
                assert records, f"{name} printed no JSON line: {done.stdout[-2000:]}"
