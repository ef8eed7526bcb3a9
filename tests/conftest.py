"""Shared fixtures: the bilm-tf/AllenNLP reference model, small random biLMs, and ONNX exports made once for
the whole run; the order in which the test files start."""

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import settings as hypothesis_settings
from thinc.api import fix_random_seed

from fixture_paths import ELMO_FIXTURE
from run_wide import run_wide
from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.io.hdf5 import load_bilm_tf

# Tests use tiny models, for which one thread is fastest (and steadier on a shared 2-core machine); the
# suite runs one worker a CPU (run.sh: pytest-xdist), so the processes tests start get one thread too.
torch.set_num_threads(1)
os.environ["OMP_NUM_THREADS"] = "1"

# CI must not fail by chance: under CI, hypothesis draws the same examples every run (`derandomize`); on a
# developer's machine it explores, and a failure it finds is printed with the example to reproduce it.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


@pytest.fixture(autouse=True)
def seeded_random_state() -> None:
    """Every test starts from the same random state (Python, numpy, torch, thinc/cupy), whatever ran before it on
    its worker: a test that draws (dropout masks, random weights) gives the same result in every run."""
    fix_random_seed(0)


# The test files that take longest on 2 cores, longest first. `bash run.sh test` gives each worker a whole
# file at a time, in collection order (--no-loadscope-reorder): these start first, so that none of them is
# left running alone at the end while the other worker idles. Two that wait on the same shared export
# (fixture_graph_file) are kept apart. Order only; every test still runs.
LONGEST_FIRST = (
    "project/test_workflow.py",
    "test_readme.py",
    "onnx/test_runtime.py",
    "bilm/test_precision.py",
    "layers/test_onnx_bilm.py",
    "embed/test_shards.py",
    "embed/test_output.py",
    "test_install.py",
    "onnx/test_export.py",
    "test_benchmarks.py",
    "pretrain/test_loop.py",
    "pretrain/test_checkpoint.py",
    "pretrain/test_distributed.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        inside = item.path.is_relative_to(tests)
        return rank.get(item.path.relative_to(tests).as_posix(), len(rank)) if inside else len(rank)

    items.sort(key=order)  # stable: within a file, and among the other files, the order stays


@pytest.fixture
def count_bilm_calls(monkeypatch) -> dict[str, int]:
    """How many times the torch biLM ran (its forward) from the test's start: {"n": count}."""
    calls = {"n": 0}
    forward = BiLM.forward

    def counting(self, *args, **kwargs):
        calls["n"] += 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(BiLM, "forward", counting)
    return calls


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    return ELMO_FIXTURE


@pytest.fixture(scope="session")
def reference_bilm() -> BiLM:
    """The tiny real bilm-tf model of AllenNLP's test fixtures (read-only: do not train it)."""
    return load_bilm_tf(ELMO_FIXTURE / "options.json", ELMO_FIXTURE / "lm_weights.hdf5")


def random_bilm(seed: int = 0, **overrides) -> BiLM:
    """A small random biLM; overrides go to BiLMOptions."""
    kwargs = dict(
        filters=[(1, 8), (2, 8), (3, 16)],
        char_embedding_dim=4,
        n_highway=1,
        lstm_dim=24,
        projection_dim=8,
        n_layers=2,
    )
    kwargs.update(overrides)
    bilm = BiLM(BiLMOptions(**kwargs))
    bilm.reset_parameters(seed)
    bilm.eval()
    return bilm


@pytest.fixture(scope="session")
def make_bilm():
    """Factory fixture: make_bilm(seed=0, **option_overrides) -> a small random BiLM in eval mode."""
    return random_bilm


@dataclass(frozen=True)
class ExportedGraph:
    path: Path  # read-only: copy it to edit, rename or damage it
    output: str  # what `spacy elmo export` printed
    said: list[str]  # the warnings and torch exporter log records of the export


def shared_export(tmp_path_factory: pytest.TempPathFactory, model: str, name: str) -> ExportedGraph:
    """`spacy elmo export MODEL` made once for the whole run (an export takes long), as name.onnx."""
    pytest.importorskip("onnxscript")  # the [onnx] extra ("onnx" would find tests/onnx/, a namespace package)
    from onnx_exports import export_with_cli

    with run_wide(tmp_path_factory, "onnx-graphs") as directory:
        path, record = directory / f"{name}.onnx", directory / f"{name}.json"
        if not record.exists():
            output, said = export_with_cli(model, path)
            path.chmod(0o444)
            record.write_text(json.dumps({"output": output, "said": said}), encoding="utf-8")
        made = json.loads(record.read_text(encoding="utf-8"))
    return ExportedGraph(path, made["output"], made["said"])


@pytest.fixture(scope="session")
def fixture_graph_file(tmp_path_factory) -> ExportedGraph:
    """The reference model's ONNX graph, exported by the command once for the run."""
    return shared_export(tmp_path_factory, str(ELMO_FIXTURE), "elmo-fixture")


@pytest.fixture(scope="session")
def shipped_graph_file(tmp_path_factory) -> ExportedGraph:
    """The shipped model's ONNX graph, exported by the command once for the run."""
    return shared_export(tmp_path_factory, "en_elmo_small", "en_elmo_small")
