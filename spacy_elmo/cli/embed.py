"""`spacy elmo embed`: a text or JSONL file to HDF5 or Parquet; `embed-merge`: its shards joined."""

import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer
from tqdm import tqdm

from ..bilm.batching import DEFAULT_WINDOW_CONTEXT, DEFAULT_WINDOW_SIZE
from ..embed import EmbedSettings, EmbedWarning, embed_file, merge_shards
from ..embed.shards import parse_shard, shard_from_env, shard_path
from ..mix import REDUCTIONS
from . import PIN_OPTION, elmo_cli, one_line_errors


@elmo_cli.command("embed")
def embed_cli(
    model: str = typer.Argument(
        ..., help="Any model the package loads, a shipped model name, or (with --runtime onnxruntime) an .onnx graph"
    ),
    input_path: Path = typer.Argument(..., help="Text (one sentence a line; .gz ok) or JSONL file (not a pipe)"),
    output_path: Path = typer.Argument(
        ..., help="HDF5 or Parquet output (--format); a run killed before it finished is resumed by a re-run"
    ),
    layers: str = typer.Option("all", "--layers", help=f"one of {', '.join(REDUCTIONS)}"),
    text_field: str = typer.Option("text", "--text-field", help="JSONL field holding the text"),
    encoding: str = typer.Option(
        "utf-8",
        "--encoding",
        help="the input's encoding (a leading byte-order mark is skipped); bytes that do not decode are refused",
    ),
    tokenizer: str = typer.Option("whitespace", "--tokenizer", help="'whitespace' or a spaCy language code"),
    token_budget: int = typer.Option(4096, "--batch-tokens", help="padded tokens per batch"),
    dtype: str = typer.Option("float32", "--dtype", help="float32 or float16 storage"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:1, ..."),
    precision: str = typer.Option(
        "fp32", "--precision", help="matrix products in fp32, bf16, int8 (CPU only) or fp16 (GPU); outputs are float32"
    ),
    workers: int = typer.Option(1, "--workers", help="worker processes (CPU)"),
    threads: int = typer.Option(
        0,
        "--threads",
        help="threads (0: the runtime's default, at most the CPUs this process may use); each worker uses 1",
    ),
    runtime: str = typer.Option(
        "torch",
        "--runtime",
        help="torch, or onnxruntime: the exported graph on the CPU in fp32 (an .onnx MODEL needs no torch)",
    ),
    window_size: int = typer.Option(
        DEFAULT_WINDOW_SIZE, "--window-size", help="longer lines are cut into overlapping windows of this many tokens"
    ),
    window_context: int = typer.Option(
        DEFAULT_WINDOW_CONTEXT, "--window-context", help="tokens of context each window reads on each side"
    ),
    chunk_lines: int = typer.Option(256, "--chunk-lines", help="lines per chunk: the work kept if the run is killed"),
    sha256: Optional[str] = PIN_OPTION,
    alignment: Optional[str] = typer.Option(
        None,
        "--alignment",
        help="an aligned multilingual model's matrix (allennlp/multilingual-*): its .pth file, or auto for the "
        "one beside the model; every layer's vectors x become x @ M.T, so languages share one space",
    ),
    output_format: Optional[str] = typer.Option(
        None,
        "--format",
        help="hdf5 (a dataset a line) or parquet (a row a line: line, tokens, elmo); default: parquet for an "
        "OUTPUT ending in .parquet, else hdf5",
    ),
    shard: Optional[str] = typer.Option(
        None,
        "--shard",
        help="I/N: embed only shard I of N (lines i with i % N == I) into its own file; "
        "default: RANK/WORLD_SIZE from the environment when WORLD_SIZE > 1 (torchrun, cluster launchers)",
    ),
) -> None:
    """Embed every line of INPUT_PATH into OUTPUT_PATH (dataset "i" = line i; Parquet: row with line i); with
    shards, into OUTPUT.shardI-of-N.hdf5 each, joined by `embed-merge` (Parquet shards are read together as
    one dataset instead). If the run is stopped or killed, run the same
    command again: it does only what is left. The output is bound to the model, the input and the settings
    that change the numbers; a re-run with any of them changed is refused, naming what differs."""
    with one_line_errors():
        settings = EmbedSettings(
            model,
            layers,
            text_field,
            tokenizer,
            token_budget,
            dtype,
            device,
            precision,
            chunk_size=chunk_lines,
            n_threads=threads,
            window_size=window_size,
            window_context=window_context,
            sha256=sha256,
            runtime=runtime,
            encoding=encoding,
            alignment=alignment,
        )
        part = parse_shard(shard) if shard is not None else shard_from_env()
        desc = "embedding" if part is None else f"embedding shard {part[0]}/{part[1]}"
        # the bar appears with the first lines written: a model or input refused says so on a clean line
        bars: list[tqdm] = []

        def progress(n_lines: int) -> None:
            if not bars:
                bars.append(tqdm(unit=" lines", desc=desc))
            bars[0].update(n_lines)

        try:
            with warnings_as_lines():
                written = embed_file(
                    input_path,
                    output_path,
                    settings,
                    workers=workers,
                    progress=progress,
                    shard=part,
                    output_format=output_format or ("parquet" if output_path.suffix.lower() == ".parquet" else "hdf5"),
                )
        finally:
            for bar in bars:
                bar.close()
    target = output_path if part is None else shard_path(output_path, part)
    typer.echo(f"embedded {written} lines now; {target} is finished")


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Show an `EmbedWarning` as one line on stderr, other warnings as Python does. The bar's line is ended
    first: `tqdm.write` would clear it with a carriage return, which a log keeps, sharing the bar's line."""
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if issubclass(category, EmbedWarning):
                with tqdm.get_lock():
                    print(f"\nwarning: {message}", file=sys.stderr, flush=True)
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


@elmo_cli.command("embed-merge")
def embed_merge_cli(
    output_path: Path = typer.Argument(..., help="The merged HDF5 file (the layout of a single `embed` run)"),
    shards: list[Path] = typer.Argument(..., help="Every shard file, e.g. out.shard*-of-4.hdf5"),
) -> None:
    """Join the shard files of a sharded `embed` into one file, checking that every line is there once.
    An existing OUTPUT_PATH is never replaced: the same merge run again checks it and says it is finished."""
    with one_line_errors():
        n_lines = merge_shards(shards, output_path)
    if n_lines == 0:  # the output was this merge already (its digest checked), or the input is empty
        typer.echo(f"merged 0 lines now; {output_path} is finished (the merge of these shards, its digest checked)")
    else:
        typer.echo(f"merged {len(shards)} shards: {n_lines} lines in {output_path}")
