"""Embed a text or JSONL file into HDF5, like the old `allennlp elmo` command, but resumable.

Every input line (or JSONL record) is one sentence; its vectors go to the dataset named by its line
index ("0", "1", ...): all layers (L+1, n_tokens, 2P), the top layer or the average (n_tokens, 2P).
The input is streamed in chunks; each finished chunk is flushed, so an interrupted run started again
skips the lines already written. Worker processes (CPU) each load the model once and embed whole chunks.

A corpus too large for one machine is cut into shards: shard i of n takes the lines whose index is i
modulo n (deterministic, balanced, and known while streaming), writes its own file
(`out.shard{i}-of-{n}.hdf5`, resumable like any output) and records when it is complete; `merge_shards`
joins complete shards into one file with the layout of a single run, checking that every line is there
exactly once.
"""

import json
import os
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

    def __post_init__(self) -> None:
        """Refuse a bad precision before any file is read or written."""
        from .bilm.precision import check_device, check_precision

        check_precision(self.precision, "--precision")
        if not self.device.startswith("cpu"):
            import torch

            check_device(self.precision, torch.device(self.device.split(":")[0]))


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
    from .io.resolve import load_bilm

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


class ShardError(ValueError):
    """Shard files that do not make up one whole run: missing, duplicated, incomplete or mismatched."""


Shard = tuple[int, int]  # (index, count)


def parse_shard(spec: str) -> Shard:
    """ "I/N" -> (I, N), with 0 <= I < N."""
    try:
        index, count = (int(part) for part in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard must be I/N (e.g. 0/4), got {spec!r}") from None
    if not 0 <= index < count:
        raise ValueError(f"--shard {spec}: the index must be in 0..{count - 1}")
    return index, count


def shard_from_env(environ: Optional[dict] = None) -> Optional[Shard]:
    """(RANK, WORLD_SIZE) as torchrun and most cluster launchers set them, or None for one process."""
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    return (int(env.get("RANK", "0")), world) if world > 1 else None


def shard_path(output_path: Path, shard: Shard) -> Path:
    index, count = shard
    return output_path.with_name(f"{output_path.stem}.shard{index}-of-{count}{output_path.suffix}")


def device_for_rank(device: str, environ: Optional[dict] = None) -> str:
    """ "cuda" under a launcher means this process's GPU (LOCAL_RANK); anything more specific is kept."""
    env = os.environ if environ is None else environ
    if device == "cuda" and "LOCAL_RANK" in env:
        return f"cuda:{int(env['LOCAL_RANK'])}"
    return device


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
    if settings.layers not in LAYER_CHOICES:
        raise ValueError(f"layers must be one of {LAYER_CHOICES}, got {settings.layers!r}")
    if not input_path.exists():
        raise FileNotFoundError(f"input file not found: {input_path}")
    import h5py  # only here: the rest of the package does not need it

    if shard is not None:
        output_path = shard_path(output_path, shard)
    try:
        handle = h5py.File(output_path, "a")
    except OSError as err:
        raise ValueError(f"{output_path}: cannot open for writing or resuming (corrupt HDF5?): {err}") from None
    written = 0
    with handle:
        previous = handle.attrs.get("settings")
        described = {
            "model": settings.model,
            "layers": settings.layers,
            "tokenizer": settings.tokenizer,
            "dtype": settings.dtype,
        }
        if settings.precision != "fp32":  # (absent for fp32: files written before the setting still resume)
            described["precision"] = settings.precision
        current = json.dumps(described)
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
        handle.attrs["n_input_lines"] = counter.n_lines
        handle.attrs["complete"] = True
    return written


def merge_shards(shard_files: Sequence[Path], output_path: Path) -> int:
    """Join complete shard files into one file with the layout of a single run (dataset "i" = line i);
    returns the number of lines. Every shard 0..n-1 must be there once, complete, with the same settings
    and input, and every line of the input exactly once; a ShardError names what is not."""
    import h5py

    if not shard_files:
        raise ShardError("no shard files given")
    shards: dict[int, Path] = {}
    described: dict[str, object] = {}
    for path in shard_files:
        if not Path(path).exists():
            raise FileNotFoundError(f"shard file not found: {path}")
        with h5py.File(path, "r") as handle:
            if "shard" not in handle.attrs:
                raise ShardError(f"{path}: not a shard file (written without --shard)")
            index, count = json.loads(handle.attrs["shard"])
            if not handle.attrs.get("complete", False):
                raise ShardError(f"{path}: shard {index} of {count} is incomplete: run it again to resume it")
            for key, value in (
                ("count", count),
                ("settings", handle.attrs["settings"]),
                ("n_input_lines", int(handle.attrs["n_input_lines"])),
            ):
                if described.setdefault(key, value) != value:
                    raise ShardError(f"{path}: its {key} ({value}) differs from the other shards' ({described[key]})")
        if index in shards:
            raise ShardError(f"shard {index} of {count} given twice: {shards[index]} and {path}")
        shards[index] = Path(path)
    count = int(described["count"])  # type: ignore[call-overload]
    missing = [i for i in range(count) if i not in shards]
    if missing:
        expected = ", ".join(str(shard_path(output_path, (i, count))) for i in missing)
        raise ShardError(f"missing shard(s) {missing} of {count}: expected {expected}")
    n_lines = int(described["n_input_lines"])  # type: ignore[call-overload]
    tmp = output_path.with_name(output_path.name + ".tmp")
    with h5py.File(tmp, "w") as out:
        out.attrs["settings"] = described["settings"]
        seen: set = set()
        for index in range(count):
            with h5py.File(shards[index], "r") as handle:
                names = set(handle.keys())
                expected_lines = {str(i) for i in range(index, n_lines, count)}
                if names != expected_lines:
                    absent = sorted(expected_lines - names, key=int)[:10]
                    strays = sorted(names - expected_lines)[:10]
                    raise ShardError(
                        f"{shards[index]}: lines missing {absent} / not of this shard {strays}; run the shard again"
                    )
                for name in sorted(names, key=int):
                    handle.copy(handle[name], out, name=name)
                seen |= names
        out.attrs["n_input_lines"] = n_lines
        out.attrs["complete"] = True
    tmp.replace(output_path)
    return len(seen)
