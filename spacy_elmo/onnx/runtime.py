"""An exported biLM run by ONNX Runtime on the CPU, with no torch: `OnnxRunner`, the stateless fp32
counterpart of `BiLMRunner`, with the same ids, batches and windows.

Each process keeps its own sessions (`_sessions`, by object). A forked child must neither use nor free its
parent's: freeing one waits forever on condition variables whose waiters (the parent's pool threads) do
not exist in the child, so at fork they move where nothing frees them (`_inherited`).
"""

import functools
import hashlib
import itertools
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy

from ..bilm.batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET, SentenceRunner, token_slice
from ..bilm.lexicon import AnyLexicon
from ..bilm.options import BiLMOptions
from ..cpus import omp_threads, usable_cpus
from ..errors import reading, require
from ..io.digest import check_pin
from ..io.onnx_graph import (
    EXPORT_AGAIN,
    INPUT_NAME,
    OUTPUT_NAME,
    GraphMetadata,
    OnnxModelError,
    names_onnx_graph,
    read_graph,
)

# this process's sessions, by `OnnxRunner._key`; and those inherited through a fork, never freed (see above)
_sessions: dict[int, Any] = {}
_inherited: list[dict[int, Any]] = []
_keys = itertools.count()


def _keep_inherited_sessions() -> None:
    _inherited.append(dict(_sessions))
    _sessions.clear()


os.register_at_fork(after_in_child=_keep_inherited_sessions)


@dataclass(frozen=True)
class LoadedGraph:
    """A graph to serve, named by `source`; `exported_from`: what an output records of the model it was exported
    from now, and its options (None: an .onnx file, whose own metadata says both). Its metadata is read from the
    bytes, with no session: each runner makes the one it serves with (and checks the graph's shapes there)."""

    graph: bytes
    source: str
    exported_from: Optional[tuple[dict[str, Any], BiLMOptions]] = None

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.graph).hexdigest()

    @functools.cached_property
    def metadata(self) -> GraphMetadata:
        with reading(self.source, EXPORT_AGAIN):
            return read_graph(self.graph)

    @property
    def options(self) -> BiLMOptions:
        return self.metadata.options if self.exported_from is None else self.exported_from[1]

    def describe(self) -> dict[str, Any]:
        """What an output records of the graph: the model it was exported from, else the .onnx file itself."""
        if self.exported_from is not None:
            return self.exported_from[0]
        return {
            "path": self.source,
            "format": "onnx",
            "sha256": self.sha256,
            "source_sha256": self.metadata.source_sha256,
        }


def read_graph_file(path: Union[str, Path]) -> bytes:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no such ONNX file (write one with `python -m spacy_elmo export`)")
    return file.read_bytes()


def load_graph(path: str, sha256: Optional[str]) -> LoadedGraph:
    """The graph `path` serves, its `sha256` pin checked: an .onnx file as it is (no torch), any other model
    exported (torch and the [onnx] extra)."""
    if names_onnx_graph(path):
        loaded = LoadedGraph(read_graph_file(path), path)
        check_pin(loaded.sha256, sha256, path)
        return loaded
    try:
        from ..io.resolve import load_model
        from .export import export_bytes
    except ImportError as err:
        raise ImportError(
            f"{path!r} is not an .onnx file, so it is exported before it is served, which needs torch "
            f"and the [onnx] extra ({err}); or export it beforehand with `python -m spacy_elmo export` and give "
            "the .onnx file"
        ) from None
    model = load_model(path, sha256)
    graph = export_bytes(model.bilm, source_sha256=model.sha256)
    return LoadedGraph(graph, str(model.source.path), (model.describe(), model.bilm.options))


class OnnxRunner(SentenceRunner):
    """Runs an exported biLM with ONNX Runtime: `graph` (the .onnx file's bytes, named by `source`), or `load`
    returning a `LoadedGraph` on first use; `n_threads`: intra-op threads (0: see `_threads`)."""

    stateful = False
    precision = "fp32"
    max_batch_size: Optional[int] = DEFAULT_MAX_BATCH_SIZE

    def __init__(
        self,
        graph: Optional[bytes] = None,
        *,
        load: Optional[Callable[[], LoadedGraph]] = None,
        source: str = "ONNX graph",
        n_threads: int = 0,
        token_budget: int = 0,
    ) -> None:
        if graph is None and load is None:
            raise ValueError("OnnxRunner needs a graph or a function that loads one")
        self._load = load
        self._graph: Optional[bytes] = None
        self._metadata: Optional[GraphMetadata] = None
        self.n_threads = n_threads
        self.token_budget = token_budget or DEFAULT_TOKEN_BUDGET  # 0: the default (a CPU's)
        self._register()
        if graph is not None:
            self.set_graph(graph, source)

    def _register(self) -> None:
        """A key of this object's own for `_sessions`; its session there is freed with it."""
        self._key = next(_keys)
        weakref.finalize(self, _sessions.pop, self._key, None)

    @classmethod
    def from_file(cls, path: Union[str, Path], **settings: Any) -> "OnnxRunner":
        return cls(read_graph_file(path), source=str(path), **settings)

    @property
    def loaded(self) -> bool:
        return self._metadata is not None

    def load(self) -> "OnnxRunner":
        """This runner, its graph read (or exported) now if it has not been."""
        if self._metadata is None:
            assert self._load is not None
            found = self._load()
            self.set_graph(found.graph, found.source)
        return self

    def set_graph(self, graph: bytes, source: str, remedy: str = EXPORT_AGAIN) -> None:
        """Serve `graph` (`source` names it) from now on; `remedy`: what errors about a damaged graph advise."""
        _sessions.pop(self._key, None)
        self._graph, self._metadata = graph, None
        self.source, self.remedy, self._origin_pid = source, remedy, os.getpid()
        self._metadata = self._read_metadata()

    @property
    def graph(self) -> bytes:
        """The graph's bytes (what a saved pipeline stores)."""
        self.load()
        assert self._graph is not None
        return self._graph

    @property
    def metadata(self) -> GraphMetadata:
        self.load()
        assert self._metadata is not None
        return self._metadata

    @property
    def options(self) -> BiLMOptions:
        return self.metadata.options

    @property
    def lexicon(self) -> AnyLexicon:
        return self.metadata.lexicon

    @property
    def sha256(self) -> str:
        """The SHA-256 of the graph's bytes (of the .onnx file)."""
        return hashlib.sha256(self.graph).hexdigest()

    def session(self) -> Any:
        """This process's ONNX Runtime session, made on first use; one thread in a process other than the
        one that read the graph (N processes on N cores want one each)."""
        session = _sessions.get(self._key)
        if session is None:
            if self._graph is None:
                self.load()
            require("the 'onnxruntime' runtime", "onnxruntime", extra="onnx")
            import onnxruntime as ort

            settings = ort.SessionOptions()
            settings.intra_op_num_threads = self._threads() if os.getpid() == self._origin_pid else 1
            settings.log_severity_level = 3  # errors only: its warnings are about graph rewrites
            try:
                session = ort.InferenceSession(self._graph, settings, providers=["CPUExecutionProvider"])
            except Exception as err:  # ONNX Runtime raises its own exception types for bad graphs
                raise OnnxModelError(
                    f"{self.source}: not a readable ONNX graph ({type(err).__name__}: {err})"
                ) from None
            _sessions[self._key] = session
        return session

    def _threads(self) -> int:
        """`n_threads`; for 0, `OMP_NUM_THREADS` (as torch reads it) up to the usable CPUs, else ONNX Runtime's
        default (0, which reads neither affinity nor quota) where every CPU is usable, else one per usable CPU."""
        if self.n_threads:
            return self.n_threads
        usable, asked = usable_cpus(), omp_threads()
        if asked is not None:
            return min(asked, usable)
        return usable if usable < (os.cpu_count() or 1) else 0

    def _read_metadata(self) -> GraphMetadata:
        """The graph's metadata, checked against its input, output and the digest it records of itself; its
        session made now, which is the one it serves with (ONNX Runtime refuses a graph it cannot run here)."""
        assert self._graph is not None
        self.session()
        with reading(self.source, self.remedy):
            return read_graph(self._graph)

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> numpy.ndarray:
        return self.lexicon.batch_to_ids(sentences)

    def run(self, char_ids: numpy.ndarray) -> numpy.ndarray:
        """(B, T, width) int64 ids -> (L+1, B, T, 2P) float32 layers, zero past each row's end."""
        if char_ids.shape[0] == 0:
            o = self.options
            return numpy.zeros((o.n_output_layers, 0, char_ids.shape[1], o.output_dim), dtype=numpy.float32)
        (layers,) = self.load().session().run([OUTPUT_NAME], {INPUT_NAME: char_ids.astype(numpy.int64, copy=False)})
        return layers

    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[numpy.ndarray]:
        """One batch of sentences -> (L+1, n_tokens, 2P) float32 arrays."""
        layers = self.run(self.batch_to_ids(sentences))
        return [numpy.ascontiguousarray(layers[:, row, token_slice(0, len(s))]) for row, s in enumerate(sentences)]

    def __getstate__(self) -> dict[str, Any]:  # pickled without a session (spawn)
        return {name: value for name, value in self.__dict__.items() if name != "_key"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._register()
