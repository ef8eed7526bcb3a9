"""`run.sh`'s set-up chooses where torch comes from: PyTorch's CPU index when it answers, pip's default index
when it cannot be reached or pip fails there, and TORCH_PIP_ARGS as given. Both indexes are simulated: a local
HTTP server stands in for the CPU index, a closed local port for one that cannot be reached, and the
virtualenv's `python` is a stand-in that records each pip call instead of installing anything."""

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixture_paths import ROOT

pytestmark = pytest.mark.timeout(120)

# the virtualenv's python: pip calls are recorded (and fail for the index named in FAIL_INDEX), anything else
# (the index probe) runs in the real interpreter
STAND_IN = """#!/usr/bin/env bash
if [ "$1" = -m ] && [ "$2" = pip ]; then
  echo "$*" >> "$PIP_LOG"
  if [ -n "${FAIL_INDEX:-}" ] && [[ " $* " == *" --index-url $FAIL_INDEX "* ]]; then exit 1; fi
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


@pytest.fixture(scope="module")
def cpu_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local simple index with a `torch/` page, as PyTorch's CPU index has."""
    root = tmp_path_factory.mktemp("index")
    (root / "whl" / "cpu" / "torch").mkdir(parents=True)
    (root / "whl" / "cpu" / "torch" / "index.html").write_text("<html><body></body></html>")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()
    server.server_close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"


def set_up(tmp_path: Path, **env: str) -> tuple[str, list[str]]:
    """Run run.sh's set-up against the stand-in virtualenv; (its output, the pip calls it made)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    script = tmp_path / "run.sh"  # a copy beside a copy of pyproject.toml: the stamp lands in the stand-in venv
    shutil.copy(ROOT / "run.sh", script)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    log = tmp_path / "pip.log"
    environment = {k: v for k, v in os.environ.items() if k not in ("TORCH_INDEX", "TORCH_PIP_ARGS", "TORCH_SPEC")}
    environment.update(VENV=str(venv), PIP_LOG=str(log), REAL_PYTHON=sys.executable, **env)
    done = subprocess.run(
        ["bash", str(script), "no-such-task"], env=environment, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 2, done.stderr  # the set-up finished; then the unknown task's usage line
    assert "usage: bash run.sh" in done.stderr
    return done.stdout + done.stderr, log.read_text().splitlines()


def torch_calls(calls: list[str]) -> list[str]:
    return [call for call in calls if "torch==" in call]


def test_torch_comes_from_the_cpu_index_when_it_answers(tmp_path, cpu_index):
    output, calls = set_up(tmp_path, TORCH_INDEX=cpu_index)
    assert torch_calls(calls) == [f"-m pip install -q --index-url {cpu_index} torch==2.13.0"]
    assert f"torch: torch==2.13.0 from {cpu_index}" in output
    assert any(".[test,project,onnx]" in call for call in calls)  # then the package, after torch
    assert calls.index(torch_calls(calls)[0]) < next(i for i, c in enumerate(calls) if ".[test" in c)


def test_an_unreachable_index_falls_back_to_the_default_one_and_says_so(tmp_path):
    unreachable = closed_port_url()
    output, calls = set_up(tmp_path, TORCH_INDEX=unreachable)
    assert torch_calls(calls) == ["-m pip install -q torch==2.13.0"]
    assert f"{unreachable} cannot be reached" in output
    assert "pip's default index" in output


def test_a_failed_install_from_the_cpu_index_falls_back_too(tmp_path, cpu_index):
    output, calls = set_up(tmp_path, TORCH_INDEX=cpu_index, FAIL_INDEX=cpu_index)
    assert torch_calls(calls) == [
        f"-m pip install -q --index-url {cpu_index} torch==2.13.0",
        "-m pip install -q torch==2.13.0",
    ]
    assert "trying pip's default index" in output


def test_torch_pip_args_are_used_as_given(tmp_path, cpu_index):
    output, calls = set_up(tmp_path, TORCH_INDEX=cpu_index, TORCH_PIP_ARGS="--index-url http://127.0.0.1:9/cu126")
    assert torch_calls(calls) == ["-m pip install -q --index-url http://127.0.0.1:9/cu126 torch==2.13.0"]
    assert "TORCH_PIP_ARGS=--index-url http://127.0.0.1:9/cu126" in output


def test_an_empty_torch_index_means_the_default_index(tmp_path):
    output, calls = set_up(tmp_path, TORCH_INDEX="", TORCH_SPEC="torch==2.13.0")
    assert torch_calls(calls) == ["-m pip install -q torch==2.13.0"]
    assert "TORCH_INDEX is empty" in output


def test_the_default_torch_index_is_pytorchs_cpu_index():
    assert "TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}" in (ROOT / "run.sh").read_text()
