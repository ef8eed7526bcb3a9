"""Embed a text or JSONL file into HDF5, like the old `allennlp elmo` command, but resumable.

Every input line (or JSONL record) is one sentence; its vectors go to the dataset named by its line
index ("0", "1", ...): all layers (L+1, n_tokens, 2P), the top layer or the average (n_tokens, 2P).
The input is streamed in chunks; each finished chunk is flushed, so an interrupted run started again
skips the lines already written. Worker processes (CPU) each load the model once and embed whole chunks.
"""

import json
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy

from .text import make_tokenizer, open_text, texts_from_jsonl

LAYER_CHOICES = ("all", "top", "average")


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


def read_lines(path: Path, text_field: str = "text") -> Iterator[str]:
    """Lines of a .txt/.txt.gz file, or the `text_field` of each record of a .jsonl/.jsonl.gz file."""
    is_jsonl = ".jsonl" in path.suffixes or ".json" in path.suffixes
    with open_text(path, errors="surrogateescape") as handle:
        if is_jsonl:
            yield from texts_from_jsonl(handle, path, text_field, option="--text-field")
        else:
            for line in handle:
                yield line.rstrip("\n")


def word_splitter(name: str) -> Callable[[str], list[str]]:
    """Split on whitespace ("whitespace") or with spaCy's tokenizer for a language code such as "en"."""
    if name == "whitespace":
        return str.split
    return make_tokenizer(name, option="--tokenizer").words


def reduce_layers(layers: numpy.ndarray, how: str) -> numpy.ndarray:
    if how == "all":
        return layers
    if how == "top":
        return layers[-1]
    return layers.mean(axis=0)


_worker_state: dict = {}


def _init_worker(settings: EmbedSettings, threads: Optional[int]) -> None:
    """Load the model for this process; `threads` is set only in worker processes (None in-process,
    so that calling `embed_file` never changes the caller's torch thread count)."""
    import torch

    from .bilm.runner import BiLMRunner
    from .loading import load_bilm

    if threads is not None:
        torch.set_num_threads(threads)
    bilm = load_bilm(settings.model).to(settings.device)
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


def _chunks(lines: Iterator[str], done: set, size: int) -> Iterator[list[tuple[int, str]]]:
    chunk: list[tuple[int, str]] = []
    for index, text in enumerate(lines):
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
) -> int:
    """Embed every line of `input_path` into `output_path`; returns the number of lines written now."""
    if settings.layers not in LAYER_CHOICES:
        raise ValueError(f"layers must be one of {LAYER_CHOICES}, got {settings.layers!r}")
    if not input_path.exists():
        raise FileNotFoundError(f"input file not found: {input_path}")
    import h5py  # only here: the rest of the package does not need it

    try:
        handle = h5py.File(output_path, "a")
    except OSError as err:
        raise ValueError(f"{output_path}: cannot open for writing or resuming (corrupt HDF5?): {err}") from None
    written = 0
    with handle:
        previous = handle.attrs.get("settings")
        current = json.dumps(
            {
                "model": settings.model,
                "layers": settings.layers,
                "tokenizer": settings.tokenizer,
                "dtype": settings.dtype,
            }
        )
        if previous is not None and previous != current:
            raise ValueError(
                f"{output_path} was started with other settings ({previous}); "
                "use a new output file or the same settings"
            )
        handle.attrs["settings"] = current
        done = set(handle.keys())
        chunks = _chunks(read_lines(input_path, settings.text_field), done, settings.chunk_size)
        results: Iterable[list[tuple[int, numpy.ndarray]]]
        pool: Optional[ProcessPoolExecutor] = None
        if workers <= 1:
            _init_worker(settings, threads=None)
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
    return written
