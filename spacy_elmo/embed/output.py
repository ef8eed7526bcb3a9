"""Embed a text or JSONL file, a line a sentence, like the old `allennlp elmo` command, but resumable.

The input is checked whole before anything is written, then streamed in chunks of lines, each kept when
finished (`store.py`), so a killed run started again does only what is left. Long lines are windowed as
the pipe windows docs, so memory stays bounded.
"""

import contextlib
import itertools
import multiprocessing
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

import numpy

from ..bilm.batching import (
    DEFAULT_WINDOW_CONTEXT,
    DEFAULT_WINDOW_SIZE,
    check_window,
    embed_windowed,
)
from ..disk import file_sha256
from ..errors import SettingError, named_settings, require
from ..io.digest import parse_pin
from ..mix import REDUCTIONS, reduce_layers
from ..runtimes import RUNTIMES, Loaded, RunSettings, check_integer
from ..text import (
    UTF8,
    check_encoding,
    check_rereadable,
    check_text,
    detect_format,
    make_tokenizer,
    text_lines,
    texts_from_jsonl,
)
from .columns import check_table_dtype
from .parquet import ParquetOutput
from .shards import Shard, shard_path
from .store import EmbedWarning, OutputFormat, PartialRun, check_output_path

STORAGE_DTYPES = ("float32", "float16")
EMBED_NAMES = {  # the settings as `spacy elmo embed` calls them
    "path": "MODEL",
    **{name: f"--{name}" for name in ("runtime", "device", "precision", "sha256", "layers", "dtype", "encoding")},
    **{"n_threads": "--threads", "token_budget": "--batch-tokens", "chunk_size": "--chunk-lines"},
    **{"window_size": "--window-size", "window_context": "--window-context", "alignment": "--alignment"},
}
OUTPUT_FORMATS = ("hdf5", "parquet")


@dataclass
class EmbedSettings:
    model: str
    layers: str = "all"
    text_field: str = "text"
    tokenizer: str = "whitespace"  # or a spaCy language code such as "en"
    token_budget: int = 4096
    dtype: str = "float32"
    device: str = "cpu"
    precision: str = "fp32"
    chunk_size: int = 256  # lines per chunk: the unit of work kept across a kill
    n_threads: int = 0  # torch threads in this process (0: torch's setting); worker processes use 1
    window_size: int = DEFAULT_WINDOW_SIZE
    window_context: int = DEFAULT_WINDOW_CONTEXT
    sha256: Optional[str] = None  # the model's pinned digest
    runtime: str = "torch"  # or "onnxruntime": the exported graph, CPU, fp32 (no torch with an .onnx MODEL)
    encoding: str = UTF8  # the input's; anything that does not decode is refused (`text.check_text`)
    alignment: Optional[str] = None  # an aligned model's matrix: its path, or "auto" (`io.alignment`)

    def __post_init__(self) -> None:
        """Refuse a bad setting, naming the option, before any file is read or written."""
        self.encoding = check_encoding(self.encoding, "--encoding")
        with named_settings(**EMBED_NAMES):
            for setting, choice, allowed in (
                ("layers", self.layers, REDUCTIONS),
                ("dtype", self.dtype, STORAGE_DTYPES),
            ):
                if choice not in allowed:
                    raise SettingError(f"must be one of {', '.join(allowed)}, got {choice!r}", setting)
            for setting, value, least in (
                ("token_budget", self.token_budget, 1),
                ("chunk_size", self.chunk_size, 1),
                ("window_size", self.window_size, 1),
                ("window_context", self.window_context, 0),
            ):
                check_integer(setting, value, least)
            self.run = RunSettings(
                self.runtime, self.device, self.precision, self.n_threads, self.token_budget, token_cache_size=16384
            )
            parse_pin(self.sha256)
        try:
            check_window(self.window_size, self.window_context)
        except ValueError as err:
            raise ValueError(f"--window-size/--window-context: {err}") from None

    def numbers(self) -> dict[str, Any]:
        """The settings that change what is written, which a resumed or merged output must agree on."""
        numbers = asdict(self)
        # the model is in its own description; `embed_file` records the alignment's digest, only when set
        for setting in ("model", "sha256", "token_budget", "n_threads", "alignment"):
            del numbers[setting]
        numbers["chunk_lines"] = numbers.pop("chunk_size")
        numbers["device"] = self.device.split(":")[0]
        return numbers


def make_tokenize(settings: EmbedSettings) -> Callable[[str], list[str]]:
    """The settings' tokenizer: whitespace, or spaCy's for a language code ("en"), whitespace tokens left out."""
    if settings.tokenizer == "whitespace":
        return str.split
    return make_tokenizer(settings.tokenizer, option="--tokenizer").words


class Embedder:
    """The model, runner and tokenizer of `embed` and every table engine alike, so a text has the same
    vectors whichever way it is embedded. `threads` (None in-process: the settings' `n_threads`) is set
    before the model is loaded (`Runtime.pin_threads`); `loaded`, `alignment`: the model and the settings' matrix,
    loaded already."""

    def __init__(
        self,
        settings: EmbedSettings,
        threads: Optional[int] = None,
        loaded: Optional[Loaded] = None,
        alignment: Optional[numpy.ndarray] = None,
    ):
        runtime = RUNTIMES[settings.runtime]
        if threads is not None:
            runtime.pin_threads(threads)
        self.settings = settings
        self.tokenize = make_tokenize(settings)
        loaded = load_embed_model(settings) if loaded is None else loaded
        self.shape = model_shape(settings, loaded)
        if settings.alignment and alignment is None:
            alignment = load_embed_alignment(settings, loaded)[0]
        self.alignment = alignment
        run = settings.run if threads is None else replace(settings.run, n_threads=threads)
        self.runner = runtime.runner(run, loaded)

    def embed(self, tokenized: Sequence[Sequence[str]]) -> list[numpy.ndarray]:
        """Tokenized texts -> their vectors: windowed, reduced and stored as the settings say."""
        arrays = embed_windowed(self.runner, tokenized, self.settings.window_size, self.settings.window_context)
        arrays = [reduce_layers(array, self.settings.layers) for array in arrays]
        if self.alignment is not None:  # after the reduction: the same (it is linear), on fewer vectors
            from ..io.alignment import align_layers

            arrays = [align_layers(array, self.alignment) for array in arrays]
        return [array.astype(self.settings.dtype) for array in arrays]


def load_embed_model(settings: EmbedSettings) -> Loaded:
    """The model, with every check and the pinned digest."""
    with named_settings(**EMBED_NAMES):
        return RUNTIMES[settings.runtime].load(settings.model, settings.sha256)


def load_embed_alignment(settings: EmbedSettings, loaded: Loaded) -> tuple[numpy.ndarray, str]:
    """The matrix `--alignment` names ("auto": the one beside the model loaded) and its digest."""
    from ..io.alignment import load_alignment

    assert settings.alignment
    with named_settings(path="--alignment", alignment="--alignment"):  # about its file
        return load_alignment(settings.alignment, settings.model, loaded.options.output_dim)


_worker_state: dict = {}


def _init_worker(
    settings: EmbedSettings, threads: Optional[int], loaded: Optional[Loaded], alignment: Optional[numpy.ndarray]
) -> None:
    _worker_state["embedder"] = Embedder(settings, threads, loaded, alignment)


def _embed_chunk(chunk: Sequence[tuple[int, str]]) -> list[tuple[int, numpy.ndarray]]:
    embedder = _worker_state["embedder"]
    arrays = embedder.embed([embedder.tokenize(text) for _, text in chunk])
    return [(index, array) for (index, _), array in zip(chunk, arrays)]


def _in_shard(index: int, shard: Optional[Shard]) -> bool:
    return shard is None or index % shard[1] == shard[0]


def _chunks(
    lines: Iterator[str], size: int, shard: Optional[Shard], read: list[int]
) -> Iterator[tuple[int, list[tuple[int, str]]]]:
    """(k, chunk k's (line index, text) pairs); `read[0]` counts the input lines read."""
    chunk: list[tuple[int, str]] = []
    k = 0
    for index, text in enumerate(lines):
        read[0] = index + 1
        if not _in_shard(index, shard):
            continue
        chunk.append((index, text))
        if len(chunk) >= size:
            yield k, chunk
            chunk, k = [], k + 1
    if chunk:
        yield k, chunk


def embed_file(
    input_path: Path,
    output_path: Path,
    settings: EmbedSettings,
    workers: int = 1,
    progress: Optional[Callable[[int], None]] = None,
    shard: Optional[Shard] = None,
    output_format: str = "hdf5",
) -> int:
    """Embed every line of `input_path` (of `shard` only: into `shard_path`); returns the number of lines
    embedded now (0 when the output was finished)."""
    with named_settings(workers="--workers"):
        check_integer("workers", workers, 1)
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"--format must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}")
    if output_format == "parquet":
        check_table_dtype(settings.dtype, "Parquet output")
        require("--format parquet", "pyarrow", extra="parquet")  # else only the finished output would need it
    make_tokenize(settings)  # an unknown --tokenizer language is refused before any file is read or written
    if shard is not None:
        output_path = shard_path(output_path, shard)
    check_paths(input_path, output_path)
    check_text(input_path, settings.encoding, option="--encoding")  # all of it, before anything is written
    # the model first (every check, the pinned digest): a model that does not load leaves nothing behind
    loaded = load_embed_model(settings)
    numbers, alignment = settings.numbers(), None
    if settings.alignment:  # read and checked once, here: the workers are given it
        alignment, numbers["alignment_sha256"] = load_embed_alignment(settings, loaded)
    bound = {  # what the output is bound to: the model and the input by content, and the settings
        "model": loaded.describe(),
        "input": {"path": str(input_path), "sha256": file_sha256(input_path)},
        "settings": numbers,
        "shard": list(shard) if shard is not None else None,
    }
    finished: Optional[OutputFormat] = None  # None: HDF5
    if output_format == "parquet":

        def tokens() -> Iterator[list[str]]:  # the output's lines tokenized again, to be stored beside their vectors
            tokenize = make_tokenize(settings)
            return (tokenize(text) for i, text in enumerate(input_texts(input_path, settings)) if _in_shard(i, shard))

        finished = ParquetOutput(output_path, tokens, model_shape(settings, loaded), settings.chunk_size)
    run = PartialRun(output_path, bound, finished)
    if run.finished():
        return 0
    started_here = not run.directory.exists()
    run.open()
    read = [0]
    written = 0
    try:
        done = run.finished_chunks()
        lines = input_texts(input_path, settings)
        chunks = _chunks(lines, settings.chunk_size, shard, read)
        todo = ((k, chunk) for k, chunk in chunks if k not in done)
        results: Iterable[tuple[int, list[tuple[int, numpy.ndarray]]]]
        with contextlib.ExitStack() as stack:
            if workers <= 1:
                _init_worker(settings, None, loaded, alignment)
                results = ((k, _embed_chunk(chunk)) for k, chunk in todo)
            else:
                spawn = RUNTIMES[settings.runtime].spawn_workers  # spawned workers are given the model loaded here
                given = loaded if spawn else None  # forked ones each load it: this one is freed before they fork
                del loaded
                context = multiprocessing.get_context("spawn") if spawn else None
                initargs = (settings, 1, given, alignment)
                pool = ProcessPoolExecutor(workers, context, initializer=_init_worker, initargs=initargs)
                stack.callback(pool.shutdown, cancel_futures=True)
                results = _pooled(pool, todo, in_flight=2 * workers)
            for k, chunk_result in results:
                run.write_chunk(k, chunk_result)
                written += len(chunk_result)
                if progress is not None:
                    progress(len(chunk_result))
    except BaseException:  # a failure (or Ctrl-C) before any chunk was kept leaves no partial directory behind
        if started_here:
            run.discard_if_unstarted()
        raise
    names = [str(index) for index in range(read[0]) if _in_shard(index, shard)]  # the lines this output holds
    run.publish(-(-len(names) // settings.chunk_size), names, read[0])
    if read[0] == 0:  # likely the wrong file; the empty output is still what was asked for
        what = "records" if detect_format(input_path) == "jsonl" else "lines"
        warnings.warn(f"{input_path} has no {what}; wrote an empty {output_path}", EmbedWarning, stacklevel=2)
    return written


def input_texts(input_path: Path, settings: EmbedSettings) -> Iterator[str]:
    """The input's texts, one a line or JSONL record, decoded strictly."""
    lines = text_lines(input_path, settings.encoding, option="--encoding")
    if detect_format(input_path) == "jsonl":
        return texts_from_jsonl(lines, input_path, settings.text_field, option="--text-field")
    return (line.rstrip("\n") for line in lines)


def model_shape(settings: EmbedSettings, loaded: Loaded) -> tuple[bool, int, int]:
    """(all layers kept, L, D) of the vectors `loaded` gives with `settings`: a table's column type."""
    return settings.layers == "all", loaded.options.n_output_layers, loaded.options.output_dim


def check_paths(input_path: Path, output_path: Path) -> None:
    """Refuse, before anything is read or written, an input that cannot be read again (a killed run resumes
    by reading it again) and an output that is a directory or the input itself."""
    if not input_path.exists():
        raise FileNotFoundError(f"input file not found: {input_path}")
    if input_path.is_dir():
        raise ValueError(f"{input_path}: INPUT is a directory; give a text or JSONL file")
    check_rereadable(
        input_path,
        "INPUT",
        "embed needs a file it can read again (it binds its output to the input's digest and resumes a killed run)",
    )
    check_output_path(output_path, [input_path], "input file")


def _pooled(
    pool: ProcessPoolExecutor, todo: Iterator[tuple[int, list[tuple[int, str]]]], in_flight: int
) -> Iterator[tuple[int, list[tuple[int, numpy.ndarray]]]]:
    """Chunks embedded by the pool, in order, at most `in_flight` ahead (`pool.map` would read it all)."""
    submitted = ((k, pool.submit(_embed_chunk, chunk)) for k, chunk in todo)
    pending = deque(itertools.islice(submitted, in_flight))
    while pending:
        k, future = pending.popleft()
        yield k, future.result()
        pending.extend(itertools.islice(submitted, 1))
