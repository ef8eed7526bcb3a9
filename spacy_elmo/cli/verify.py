"""`spacy elmo verify`: load a model with every check and say what it is (digest, options, shapes)."""

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

import typer

from ..bilm.bilm import BiLM
from ..io.arrays import bilm_arrays
from ..io.hdf5 import load_bilm_tf
from ..io.native import inspect_native
from ..io.resolve import resolve_model
from . import elmo_cli


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(bilm: BiLM) -> dict[str, Any]:
    """What a user compares two models by: the options that shape it and its arrays."""
    o = bilm.options
    arrays = dict(bilm_arrays(bilm))
    groups = {"token_encoder": 0, "lstm": 0, "softmax": 0}
    for name, value in arrays.items():
        group = "softmax" if name.startswith("softmax/") else "lstm" if name.startswith("RNN_") else "token_encoder"
        groups[group] += int(value.size)
    return {
        "layers": o.n_output_layers,
        "output_dim": o.output_dim,
        "lstm": {
            "n_layers": o.n_layers,
            "dim": o.lstm_dim,
            "projection_dim": o.projection_dim,
            "cell_clip": o.cell_clip,
            "proj_clip": o.proj_clip,
            "use_skip_connections": o.use_skip_connections,
        },
        "char_cnn": {
            "filters": [list(f) for f in o.filters],
            "n_filters": o.n_filters,
            "n_highway": o.n_highway,
            "activation": o.activation,
            "embedding_dim": o.char_embedding_dim,
            "max_characters_per_token": o.max_characters_per_token,
        },
        "vocab_size": len(bilm.vocab) if bilm.vocab is not None else None,
        "n_arrays": len(arrays),
        "parameters": {**groups, "total": sum(groups.values())},
    }


@elmo_cli.command("verify")
def verify_cli(
    model: str = typer.Argument(
        ..., help="A native model directory, a bilm-tf/AllenNLP directory or .hdf5 file, or a shipped name"
    ),
    options: Optional[Path] = typer.Option(None, "--options", help="options.json, if not beside the .hdf5"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text"),
) -> None:
    """Check a model (every array against its options; a native model against its recorded digest) and
    print its digest, options and shapes. Exit status 1 if it does not load."""
    try:
        source = resolve_model(model, options)
        if source.kind == "native":
            bilm, digest = inspect_native(source.path)
            digest_of = "recorded in the file and checked"
        else:
            bilm = load_bilm_tf(source.options_file, source.weight_file, source.vocab_file)
            digest, digest_of = file_sha256(source.weight_file), f"of {source.weight_file.name}"
    except (FileNotFoundError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    report = {
        "model": str(source.path),
        "format": source.kind,
        "sha256": digest,
        "sha256_of": digest_of,
        **describe(bilm),
    }
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    lstm, cnn, params = report["lstm"], report["char_cnn"], report["parameters"]
    typer.echo(f"model    {report['model']} ({report['format']})")
    typer.echo(f"sha256   {digest} ({digest_of})")
    typer.echo(f"layers   {report['layers']} x {report['output_dim']} (token layer + {lstm['n_layers']} LSTM layers)")
    typer.echo(
        f"lstm     dim {lstm['dim']} -> projection {lstm['projection_dim']}, clips {lstm['cell_clip']}/"
        f"{lstm['proj_clip']}, skip connections {lstm['use_skip_connections']}"
    )
    typer.echo(
        f"char_cnn {cnn['n_filters']} filters {cnn['filters']}, {cnn['n_highway']} highway, "
        f"{cnn['activation']}, embedding {cnn['embedding_dim']}"
    )
    vocab = report["vocab_size"]
    typer.echo(
        f"params   {params['total']:,} (token encoder {params['token_encoder']:,}, lstm {params['lstm']:,}, "
        f"softmax {params['softmax']:,}{f' over {vocab:,} words' if vocab else ''}) in {report['n_arrays']} arrays"
    )
    typer.echo("ok")
