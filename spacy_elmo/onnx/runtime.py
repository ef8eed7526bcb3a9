"""An exported biLM run by ONNX Runtime on the CPU: the serving runtime, with no torch anywhere.

`OnnxBiLM` is the stateless, fp32 counterpart of `BiLMRunner`: words in, one (L+1, n_tokens, 2P) array
per sentence out, with the same ids (`bilm.lexicon.batch_to_ids`), the same token-budget batches and
windows (`bilm.batching`), so the pipe and `embed` place its outputs exactly as they place the torch
runner's. It holds the graph's bytes (what a saved pipeline stores); loading checks the digest the graph
records of itself (required in format 2) and its metadata against its declared shapes (`metadata.py`).

Sessions belong to the process that made them, never to the object: each process keeps its own
(`_sessions`, by object), made when first used. A forked child (`nlp.pipe(n_process=...)`) inherits the
parent's sessions in memory but cannot use them (ONNX Runtime's thread pool does not survive a fork), and
must never free them either: freeing one destroys the pool's condition variables, whose waiters (the
parent's idle pool threads) do not exist in the child, so `pthread_cond_destroy` waits forever (the hang of
a second `nlp.pipe(n_process=2)` call). At fork, the child moves them where nothing frees them
(`_inherited`; a worker leaves with `os._exit`). A pickled object carries no session (spawn).
"""

import hashlib
import itertools
import os
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

import numpy

from ..bilm.batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET, embed_windowed, token_slice
from ..bilm.lexicon import Lexicon, batch_to_ids
from ..bilm.options import BiLMOptions
from .metadata import EXPORT_AGAIN, GraphMetadata, OnnxModelError, check_graph_sha256

INPUT_NAME, OUTPUT_NAME = "char_ids", "layers"
MISSING_RUNTIME = (
    "the 'onnxruntime' runtime needs the onnxruntime package: pip install 'spacy-elmo[onnx]' (or onnxruntime "
    "alone, to serve without torch)"
)


# this process's sessions, by `OnnxBiLM._key`; and those inherited through a fork, never freed (see above)
_sessions: dict[int, Any] = {}
_inherited: list[dict[int, Any]] = []
_keys = itertools.count()


def _keep_inherited_sessions() -> None:
    _inherited.append(dict(_sessions))
    _sessions.clear()


os.register_at_fork(after_in_child=_keep_inherited_sessions)


class OnnxGraphWarning(UserWarning):
    """A graph that loads but whose content cannot be checked (format 1: exported before graphs recorded a
    digest)."""


def import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError(f"{MISSING_RUNTIME} ({err})") from None
    return onnxruntime


class OnnxBiLM:
    """An exported biLM (`spacy elmo export`) served by ONNX Runtime.

    graph: the .onnx file's bytes; source: how errors name it (a path, "pipeline weights");
    remedy: what errors about a damaged or edited graph tell the user to do (a saved pipeline's differs);
    n_threads: ONNX Runtime's intra-op threads (0: its default, one per physical core);
    token_budget, max_batch_size: as for `BiLMRunner` (padded tokens and rows per batch).
    """

    stateful = False
    precision = "fp32"

    def __init__(
        self,
        graph: bytes,
        source: str = "ONNX graph",
        n_threads: int = 0,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        max_batch_size: Optional[int] = DEFAULT_MAX_BATCH_SIZE,
        remedy: str = EXPORT_AGAIN,
    ) -> None:
        self.graph = graph
        self.source = source
        self.remedy = remedy
        self.n_threads = n_threads
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size
        self._origin_pid = os.getpid()
        self._register()
        self.metadata = self._read_metadata()

    def _register(self) -> None:
        """A key of this object's own for `_sessions`; its session there is freed with it."""
        self._key = next(_keys)
        weakref.finalize(self, _sessions.pop, self._key, None)

    @classmethod
    def from_file(cls, path: Union[str, Path], **settings: Any) -> "OnnxBiLM":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such ONNX file (write one with `python -m spacy_elmo export`)")
        return cls(path.read_bytes(), source=str(path), **settings)

    # --- what the graph is ------------------------------------------------------------------------

    @property
    def options(self) -> BiLMOptions:
        return self.metadata.options

    @property
    def lexicon(self) -> Optional[Lexicon]:
        return self.metadata.lexicon

    @property
    def sha256(self) -> str:
        """The SHA-256 of the graph's bytes (of the .onnx file)."""
        return hashlib.sha256(self.graph).hexdigest()

    def session(self) -> Any:
        """This process's ONNX Runtime session, made on first use. A process other than the one that made
        this object (`nlp.pipe(n_process=N)`, pools) runs with one thread, whatever `n_threads` says: N
        processes on N cores want one each."""
        session = _sessions.get(self._key)
        if session is None:
            ort = import_onnxruntime()
            settings = ort.SessionOptions()
            settings.intra_op_num_threads = self.n_threads if os.getpid() == self._origin_pid else 1
            settings.log_severity_level = 3  # errors only: its warnings are about graph rewrites
            try:
                session = ort.InferenceSession(self.graph, settings, providers=["CPUExecutionProvider"])
            except Exception as err:  # ONNX Runtime raises its own exception types for bad graphs
                raise OnnxModelError(
                    f"{self.source}: not a readable ONNX graph ({type(err).__name__}: {err})"
                ) from None
            _sessions[self._key] = session
        return session

    def _read_metadata(self) -> GraphMetadata:
        """The graph's metadata, checked against the graph: its input and output names and shapes, then
        the digest it records of its own bytes (required in format 2; a format-1 graph without one loads with
        a warning)."""
        session = self.session()
        metadata = GraphMetadata.from_strings(dict(session.get_modelmeta().custom_metadata_map), self.source)
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if [i.name for i in inputs] != [INPUT_NAME] or [o.name for o in outputs] != [OUTPUT_NAME]:
            raise OnnxModelError(
                f"{self.source}: the graph takes {[i.name for i in inputs]} and returns {[o.name for o in outputs]}; "
                f"a spacy-elmo graph takes [{INPUT_NAME!r}] and returns [{OUTPUT_NAME!r}]"
            )
        metadata.check_shapes(inputs[0].shape, outputs[0].shape, self.source, self.remedy)
        if not check_graph_sha256(self.graph, self.source, metadata.format, self.remedy):
            warnings.warn(
                f"{self.source}: the ONNX graph records no digest of its content (format {metadata.format!r}: "
                "exported before spacy-elmo recorded one), so a damaged weight cannot be detected; export it again "
                "with `python -m spacy_elmo export` (or pin its sha256)",
                OnnxGraphWarning,
                stacklevel=3,
            )
        return metadata

    # --- running it ---------------------------------------------------------------------------------

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> numpy.ndarray:
        return batch_to_ids(sentences, self.options.max_characters_per_token, self.lexicon)

    def run(self, char_ids: numpy.ndarray) -> numpy.ndarray:
        """(B, T, width) int64 ids -> (L+1, B, T, 2P) float32 layers, zero past each row's end."""
        if char_ids.shape[0] == 0:
            o = self.options
            return numpy.zeros((o.n_output_layers, 0, char_ids.shape[1], o.output_dim), dtype=numpy.float32)
        (layers,) = self.session().run([OUTPUT_NAME], {INPUT_NAME: char_ids.astype(numpy.int64, copy=False)})
        return layers

    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[numpy.ndarray]:
        """One batch of sentences -> (L+1, n_tokens, 2P) float32 arrays."""
        layers = self.run(self.batch_to_ids(sentences))
        return [numpy.ascontiguousarray(layers[:, row, token_slice(0, len(s))]) for row, s in enumerate(sentences)]

    def embed_sentences(self, sentences: Sequence[Sequence[str]]) -> list[numpy.ndarray]:
        """Any number of sentences, in length-sorted batches under the token budget."""
        return self.embed_windowed(sentences, window_size=None)

    def embed_windowed(
        self, sentences: Sequence[Sequence[str]], window_size: Optional[int], window_context: int = 0
    ) -> list[numpy.ndarray]:
        """As `BiLMRunner.embed_windowed`: long sentences cut into the pipe's overlapping windows."""
        return embed_windowed(
            self.embed_batch, sentences, window_size, window_context, self.token_budget, self.max_batch_size
        )

    # --- pickling (n_process with spawn): the bytes travel, the session is made again ----------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_key"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._register()
