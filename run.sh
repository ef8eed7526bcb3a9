#!/usr/bin/env bash
# One entry point that also does the set-up: a virtualenv in .venv with a CPU build of PyTorch
# (unless TORCH_SPEC / TORCH_PIP_ARGS say otherwise), this package and its test extras.
#   bash run.sh demo     the main job (see README)
#   bash run.sh test     the test suite, one worker a CPU (pytest-xdist; a test file stays on one worker; -n 0: none)
#   bash run.sh bench    the throughput benchmarks (slow; appends to benchmarks/results/*.jsonl; --smoke: seconds)
#   bash run.sh project  the spaCy project workflow (project.yml)
#   bash run.sh lint     ruff check, ruff format --check and lint-imports (the layers and no import cycle;
#                        the dev extra is installed on first use)
#   bash run.sh types    mypy over spacy_elmo/ (likewise)
# Environment: VENV (default .venv), PYTHON (default python3), TORCH_SPEC (default torch==2.13.0),
# TORCH_INDEX (default PyTorch's CPU index, tried first; if it cannot be reached, or pip fails there, torch comes
# from pip's default index, which on Linux with PyPI is the CUDA build; "" skips it; a CUDA index such as
# https://download.pytorch.org/whl/cu126 gives that build), TORCH_PIP_ARGS (pip arguments for torch used as
# they are, instead of the index choice).
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}

# torch first, from TORCH_INDEX when it answers (PyPI's Linux torch is the CUDA build: several GB of nvidia-*
# wheels), else from pip's default index; says which one it used
install_torch() {
  local py=$1
  if [ -n "${TORCH_PIP_ARGS+set}" ]; then
    echo "torch: $TORCH_SPEC with TORCH_PIP_ARGS=$TORCH_PIP_ARGS"
    # shellcheck disable=SC2086
    "$py" -m pip install -q $TORCH_PIP_ARGS "$TORCH_SPEC"
    return
  fi
  if [ -n "$TORCH_INDEX" ]; then
    if "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=15)' \
      "$TORCH_INDEX" 2>/dev/null; then
      echo "torch: $TORCH_SPEC from $TORCH_INDEX"
      if "$py" -m pip install -q --index-url "$TORCH_INDEX" "$TORCH_SPEC"; then
        return
      fi
      echo "torch: pip could not install $TORCH_SPEC from $TORCH_INDEX; trying pip's default index" >&2
    else
      echo "torch: $TORCH_INDEX cannot be reached; $TORCH_SPEC from pip's default index instead (on Linux with" \
        "PyPI that is the CUDA build; set TORCH_INDEX or TORCH_PIP_ARGS to choose)"
    fi
  fi
  [ -n "$TORCH_INDEX" ] || echo "torch: $TORCH_SPEC from pip's default index (TORCH_INDEX is empty)"
  "$py" -m pip install -q "$TORCH_SPEC"
}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# the set-up is redone when pyproject.toml (dependencies, extras, entry points) changes
hash=$(cksum < pyproject.toml | cut -d' ' -f1)
stamp="$VENV/.spacy-elmo-installed-$hash"
if [ ! -f "$stamp" ]; then
  echo "setting up $VENV (torch: $TORCH_SPEC) ..."
  "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
  # torch first: with it installed, the package's torch requirement pulls nothing more
  install_torch "$VENV/bin/python"
  "$VENV/bin/python" -m pip install -q -e ".[test,project,onnx]"
  touch "$stamp"
fi
PY="$VENV/bin/python"
task=${1:-demo}
shift || true
# ruff and mypy come with the `dev` extra, installed only for the tasks that need them
if [ "$task" = lint ] || [ "$task" = types ]; then
  dev_stamp="$VENV/.spacy-elmo-dev-installed-$hash"
  if [ ! -f "$dev_stamp" ]; then
    echo "installing the dev extra (ruff, mypy) into $VENV ..."
    "$PY" -m pip install -q -e ".[test,project,dev,onnx]"
    touch "$dev_stamp"
  fi
fi
case "$task" in
  demo) exec "$PY" -m spacy_elmo.demo "$@" ;;
  # a file stays on one worker; the files start in collection order, longest first (tests/conftest.py)
  # pytest keeps its rewritten test modules only where Python may write bytecode: each worker rewrites less
  test) PYTHONDONTWRITEBYTECODE= exec "$PY" -m pytest -q -p no:cacheprovider -n logical --dist loadfile --no-loadscope-reorder tests "$@" ;;
  bench) for s in bilm_throughput pipe_throughput train_throughput; do "$PY" "benchmarks/$s.py" --output "benchmarks/results/$s.jsonl" "$@" || exit 1; done ;;
  project) exec "$PY" -m spacy project run all . "$@" ;;
  lint) "$VENV/bin/ruff" check . "$@" && "$VENV/bin/ruff" format --check . && exec "$VENV/bin/lint-imports" ;;
  types) exec "$VENV/bin/mypy" "$@" ;;
  *) echo "usage: bash run.sh {demo|test|bench|project|lint|types} [args]" >&2; exit 2 ;;
esac
