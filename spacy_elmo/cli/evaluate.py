"""`spacy elmo evaluate MODEL TEXT`: forward, backward and average perplexity on held-out text."""

import json
import tempfile
from pathlib import Path
from typing import Optional

import typer

from ..errors import named_settings
from . import elmo_cli, one_line_errors


@elmo_cli.command("evaluate")
def evaluate_cli(
    model: str = typer.Argument(
        ..., help="A biLM with its softmax: native directory, bilm-tf directory, or shipped name"
    ),
    text: Path = typer.Argument(..., help="Held-out text: .txt/.txt.gz, .jsonl, or tokenized (see --format)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write the results to this JSON file"),
    fmt: Optional[str] = typer.Option(
        None,
        "--format",
        help="text (raw, spaCy-tokenized), jsonl, tokenized (whitespace tokens), bilm-tf (a sentence a line); "
        "default: jsonl for a .jsonl/.json file, else text",
    ),
    text_field: str = typer.Option("text", "--text-field", help="JSONL field holding the text"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Evaluate the first N words only"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda[:N]"),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Keep the tokenized text here for reuse"),
    threads: int = typer.Option(
        0, "--threads", help="torch threads (0: torch's default, at most the CPUs this process may use)"
    ),
) -> None:
    """Perplexity (full softmax) of each direction and their average, over whole sentences."""
    from ..bilm.runner import check_threads, parse_device, torch_threads
    from ..io.resolve import check_output, load_model
    from ..pretrain.corpus import CorpusSettings, prepare_corpus, tokenize_corpus
    from ..pretrain.perplexity import stream_perplexity
    from ..text import detect_format

    with one_line_errors():
        with named_settings(n_threads="--threads", device="--device"):
            check_threads(threads)  # before the model loads: a bad option is the first thing said
            place = parse_device(device)
        with named_settings(path="MODEL", output="--output"):
            loaded = load_model(model)
            if output is not None:
                check_output(loaded, output, directory=False)
        loaded.bilm.to(place)
        settings = CorpusSettings(format=fmt or detect_format(text), text_field=text_field, max_tokens=max_tokens)
        with tempfile.TemporaryDirectory() as tmp, torch_threads(threads):
            if cache_dir is None:  # nothing to reuse: each file read once (a pipe too)
                stream = tokenize_corpus(text, settings, Path(tmp) / "text")
            else:  # keyed by the text's digest
                stream = prepare_corpus(text, settings, cache_dir)
            results = stream_perplexity(loaded.bilm, stream)
    line = json.dumps({"model": str(model), "text": str(text), **results}, indent=2)
    typer.echo(line)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(line + "\n", encoding="utf-8")
