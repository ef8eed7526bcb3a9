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
# TORCH_PIP_ARGS (extra pip arguments for torch, e.g. an index holding CPU-only or CUDA wheels).
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_PIP_ARGS=${TORCH_PIP_ARGS:-}

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
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install -q $TORCH_PIP_ARGS "$TORCH_SPEC"
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
