"""Embed a text or JSONL file into HDF5, like the old `allennlp elmo` command, but resumable.

Every input line (or JSONL record) is one sentence; its vectors go to the dataset named by its line
index ("0", "1", ...): all layers (L+1, n_tokens, 2P), the top layer or the average (n_tokens, 2P).
The input is streamed in chunks; each finished chunk is flushed, so an interrupted run started again
skips the lines already written. Worker processes (CPU) each load the model once and embed whole chunks.

With a shard (`shards.py`), only that shard's lines are embedded, into the shard's own file.
"""

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy

from ..io.atomic import atomic_path
from ..io.resolve import resolve_model
from ..launch_env import launch_env
from ..mix import REDUCTIONS, reduce_layers
from ..text import detect_format, make_tokenizer, open_text, texts_from_jsonl
from .shards import Shard, shard_path

STORAGE_DTYPES = ("float32", "float16")


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
    chunk_size: int = 256
    n_threads: int = 0  # torch threads in this process (0: torch's setting); worker processes use 1

    def __post_init__(self) -> None:
        """Refuse a bad setting, naming the option, before any file is read or written."""
        import torch

        from ..bilm.precision import check_device, check_precision

        check_precision(self.precision, "--precision")
        check_device(self.precision, torch.device(self.device.split(":")[0]))
        if self.layers not in REDUCTIONS:
            raise ValueError(f"--layers must be one of {', '.join(REDUCTIONS)}, got {self.layers!r}")
        if self.dtype not in STORAGE_DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(STORAGE_DTYPES)}, got {self.dtype!r}")
        for option, value, least in (
            ("--batch-tokens", self.token_budget, 1),
            ("--threads", self.n_threads, 0),
            ("chunk_size", self.chunk_size, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{option} must be an integer >= {least}, got {value!r}")


def read_lines(path: Path, text_field: str = "text") -> Iterator[str]:
    """Lines of a text file, or the `text_field` of each record of a JSONL file (`text.detect_format`)."""
    with open_text(path, errors="surrogateescape") as handle:
        if detect_format(path) == "jsonl":
            yield from texts_from_jsonl(handle, path, text_field, option="--text-field")
        else:
            for line in handle:
                yield line.rstrip("\n")


def word_splitter(name: str) -> Callable[[str], list[str]]:
    """Split on whitespace ("whitespace") or with spaCy's tokenizer for a language code such as "en"."""
    if name == "whitespace":
        return str.split
    return make_tokenizer(name, option="--tokenizer").words


_worker_state: dict = {}


def device_for_rank(device: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """ "cuda" under a launcher means this process's GPU (LOCAL_RANK); anything more specific is kept."""
    local_rank = launch_env(environ).local_rank
    if device == "cuda" and local_rank is not None:
        return f"cuda:{local_rank}"
    return device


def _init_worker(settings: EmbedSettings, threads: Optional[int]) -> None:
    """Load the model for this process; `threads` is set only in worker processes (None in-process,
    so that calling `embed_file` never changes the caller's torch thread count)."""
    import torch

    from ..bilm.runner import BiLMRunner
    from ..io.resolve import load_bilm

    if threads is not None:
        torch.set_num_threads(threads)
    bilm = load_bilm(settings.model).to(device_for_rank(settings.device))
    _worker_state["runner"] = BiLMRunner(
        bilm,
        token_budget=settings.token_budget,
        precision=settings.precision,
        token_cache_size=16384,
        n_threads=settings.n_threads if threads is None else 0,
    )
    _worker_state["tokenize"] = word_splitter(settings.tokenizer)
    _worker_state["settings"] = settings


def _embed_chunk(chunk: Sequence[tuple[int, str]]) -> list[tuple[int, numpy.ndarray]]:
    settings: EmbedSettings = _worker_state["settings"]
    tokenized = [_worker_state["tokenize"](text) for _, text in chunk]
    arrays = _worker_state["runner"].embed_sentences(tokenized)
    return [(index, reduce_layers(a, settings.layers).astype(settings.dtype)) for (index, _), a in zip(chunk, arrays)]


class _LineCounter:
    def __init__(self) -> None:
        self.n_lines = 0


def _chunks(
    lines: Iterator[str], done: set, size: int, shard: Optional[Shard] = None, counter: Optional[_LineCounter] = None
) -> Iterator[list[tuple[int, str]]]:
    chunk: list[tuple[int, str]] = []
    for index, text in enumerate(lines):
        if counter is not None:
            counter.n_lines = index + 1
        if shard is not None and index % shard[1] != shard[0]:
            continue
        if str(index) in done:
            continue
        chunk.append((index, text))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def embed_file(
    input_path: Path,
    output_path: Path,
    settings: EmbedSettings,
    workers: int = 1,
    progress: Optional[Callable[[int], None]] = None,
    shard: Optional[Shard] = None,
) -> int:
    """Embed every line of `input_path` into `output_path` (with `shard`: that shard's lines into its own
    file, see `shard_path`); returns the number of lines written now."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"--workers must be an integer >= 1, got {workers!r}")
    if not input_path.exists():
        raise FileNotFoundError(f"input file not found: {input_path}")
    import h5py  # only here: the rest of the package does not need it

    if shard is not None:
        output_path = shard_path(output_path, shard)
    # the model first: a model that does not load leaves no output behind
    if workers <= 1:
        _init_worker(settings, threads=None)
    else:
        resolve_model(settings.model, option="MODEL")  # the workers load it
    described = {
        "model": settings.model,
        "layers": settings.layers,
        "tokenizer": settings.tokenizer,
        "dtype": settings.dtype,
        "precision": settings.precision,
    }
    current = json.dumps(described)
    if not output_path.exists():
        # a new output appears whole (an empty, valid HDF5 file), so a run killed at any point before its
        # first chunk leaves nothing or a file that the next run opens and fills
        with atomic_path(output_path) as tmp:
            h5py.File(tmp, "w").close()
    try:
        handle = h5py.File(output_path, "a")
    except OSError as err:
        raise ValueError(f"{output_path}: cannot open for writing or resuming (corrupt HDF5?): {err}") from None
    written = 0
    with handle:
        previous = handle.attrs.get("settings")
        if previous is not None and previous != current:
            raise ValueError(
                f"{output_path} was started with other settings ({previous}); "
                "use a new output file or the same settings"
            )
        handle.attrs["settings"] = current
        if shard is not None:
            handle.attrs["shard"] = json.dumps(list(shard))
        handle.attrs["complete"] = False
        done = set(handle.keys())
        counter = _LineCounter()
        chunks = _chunks(read_lines(input_path, settings.text_field), done, settings.chunk_size, shard, counter)
        results: Iterable[list[tuple[int, numpy.ndarray]]]
        pool: Optional[ProcessPoolExecutor] = None
        if workers <= 1:
            results = map(_embed_chunk, chunks)
        else:
            pool = ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(settings, 1))
            results = pool.map(_embed_chunk, chunks)
        try:
            for chunk_result in results:
                for index, array in chunk_result:
                    handle.create_dataset(str(index), data=array)
                handle.flush()
                written += len(chunk_result)
                if progress is not None:
                    progress(len(chunk_result))
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
        handle.attrs["n_input_lines"] = counter.n_lines
        handle.attrs["complete"] = True
    return written
