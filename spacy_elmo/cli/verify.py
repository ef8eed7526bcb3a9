"""`spacy elmo verify`: load a model with every check and say what it is (digest, options, shapes)."""

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import named_settings, require
from . import PIN_OPTION, elmo_cli, one_line_errors


@elmo_cli.command("verify")
def verify_cli(
    model: str = typer.Argument(
        ...,
        help="A native model directory, a bilm-tf/AllenNLP directory, .hdf5 or .zip, an ELMoForManyLangs directory "
        "or .zip, or a shipped name",
    ),
    options: Optional[Path] = typer.Option(None, "--options", help="options.json, if not beside the .hdf5"),
    sha256: Optional[str] = PIN_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text"),
) -> None:
    """Check a model (every array against its options and for damaged values; a native model against its
    recorded digest; the digest against --sha256) and print its digest (the one to pin: it covers every
    file of the model), each file's own digest, its options and shapes. Exit status 1 if it does not load."""
    require("verify", "torch")  # before anything is read (a published name: downloaded)
    show(model_report(model, options, sha256), as_json)


@elmo_cli.command("info")
def info_cli(
    model: str = typer.Argument(..., help="A published model's name (spacy elmo models), a URL or a local model"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text"),
) -> None:
    """What a model is: format, language, layers and dimensions, vocabularies, parameters, digests and where
    it comes from (a published model: its page and licence); loaded with every check, as `verify` does."""
    from ..hub.catalog import ALIGNMENT_ROLE, find_entry

    require("info", "torch")  # before anything is read (a published name: downloaded)
    entry = None if Path(model).exists() else find_entry(model)
    if entry is not None and not as_json:  # what the catalog knows, shown first: also offline, or if it fails
        typer.echo(f"name     {entry.name} ({entry.language}): {entry.description}")
        typer.echo(f"source   {entry.page}; licence: {entry.licence}")
        size = entry.size or (f"{entry.parameters} params" if entry.parameters else "")
        if size:
            typer.echo(f"size     {size} ({entry.format})")
        if ALIGNMENT_ROLE in entry.companions:
            typer.echo(
                'aligned  into English\'s space by its matrix: alignment = "auto" (pipe), --alignment auto (embed)'
            )
    report = model_report(model, None, None)
    if entry is not None:
        fields = ("name", "language", "description", "page", "licence", "size", "parameters", "format")
        report["published"] = {field: getattr(entry, field) for field in fields}
        report["published"]["alignment"] = entry.companions.get(ALIGNMENT_ROLE)
    show(report, as_json)


def model_report(model: str, options: Optional[Path], sha256: Optional[str]) -> dict[str, Any]:
    """Everything `verify` and `info` say of a model, loaded with every check (and the pin)."""
    from ..io.arrays import MAX_ABS_WEIGHT, bilm_arrays, weight_range  # torch: see cli/__init__
    from ..io.resolve import load_model

    with one_line_errors(), named_settings(path="MODEL", sha256="--sha256"):
        loaded = load_model(model, sha256, options_file=options)
    o, arrays = loaded.bilm.options, dict(bilm_arrays(loaded.bilm))
    largest, holder = weight_range(arrays.items())
    params = {"token_encoder": 0, "lstm": 0, "softmax": 0}
    for name, value in arrays.items():
        group = "softmax" if name.startswith("softmax/") else "lstm" if name.startswith("RNN_") else "token_encoder"
        params[group] += int(value.size)
    params["total"] = sum(params.values())
    checked = [
        "every array's name and shape against the options",
        f"every weight finite and within +-{MAX_ABS_WEIGHT:g}",
        *([loaded.source.format.checksum] if loaded.source.format.checksum else []),
        *(["the pinned digest (--sha256)"] if sha256 else []),
    ]
    return {
        "model": str(loaded.source.path),
        "format": loaded.source.kind,
        "sha256": loaded.sha256,
        "sha256_of": loaded.sha256_of,
        "files": [{"role": f.role, "path": f.path, "sha256": f.sha256} for f in loaded.files],
        "converted_from": loaded.converted_from,
        "max_abs_weight": {"value": largest, "array": holder},
        "checked": checked,
        # what a user compares two models by: the options that shape it and its arrays
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
        "vocab_size": len(loaded.bilm.vocab) if loaded.bilm.vocab is not None else None,
        "n_arrays": len(arrays),
        "parameters": params,
        "pinned": bool(sha256),
        "self_checked": bool(loaded.source.format.checksum),
        "module": (o.model_extra or {}).get("tfhub"),  # what a TF-Hub module adds to the biLM (io/tfhub.py)
    }


def show(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    lstm, cnn, params = report["lstm"], report["char_cnn"], report["parameters"]
    typer.echo(f"model    {report['model']} ({report['format']})")
    typer.echo(f"sha256   {report['sha256']} ({report['sha256_of']}): the digest to pin (--sha256, model.sha256)")
    for file in report["files"]:
        typer.echo(f"file     {file['sha256']} {file['role']}: {file['path']}")
    if report["converted_from"]:
        source = report["converted_from"]
        typer.echo(
            f"source   converted from {source.get('format')} {source.get('file')}, sha256 {source.get('sha256')}"
        )
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
    largest = report["max_abs_weight"]
    typer.echo(f"weights  largest |w| {largest['value']:.4g} (in {largest['array']})")
    typer.echo("checked  " + "; ".join(report["checked"]))
    if report["module"]:
        mix = report["module"]["mix"]
        typer.echo(
            f"module   {report['module']['layout']}: its elmo output mixes the layers with weights "
            f"{[round(w, 4) for w in mix['weights']]} ({', '.join(mix['variables'])}), which the biLM does not "
            f"apply (the elmo pipe's default_mix can); not read: {', '.join(report['module']['not_read']) or 'none'}"
        )
    if not report["self_checked"] and not report["pinned"]:  # no checksum of its own: unnoticed unless pinned
        typer.echo(
            f"note     {report['format']} files carry no checksum: a weight changed within range (one flipped low "
            "exponent bit doubles or halves it) loads unnoticed unless the model digest above is pinned"
        )
    typer.echo("ok")
