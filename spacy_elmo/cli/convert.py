"""`spacy elmo convert`: bilm-tf/AllenNLP options.json + HDF5 <-> the native format."""

from pathlib import Path
from typing import Optional

import typer

from ..io.hdf5 import save_bilm_tf
from ..io.native import is_native, save_native
from ..io.resolve import load_model
from . import elmo_cli


@elmo_cli.command("convert")
def convert_cli(
    source: Path = typer.Argument(..., help="A native model directory, or a bilm-tf/AllenNLP directory or .hdf5 file"),
    output: Path = typer.Argument(..., help="Output directory"),
    to: Optional[str] = typer.Option(None, "--to", help="'native' or 'bilm-tf' (default: the other format)"),
    options: Optional[Path] = typer.Option(None, "--options", help="options.json, if not beside the .hdf5"),
    sha256: Optional[str] = typer.Option(
        None, "--sha256", help="refuse the source unless its digest is this one (as `verify` prints it)"
    ),
) -> None:
    """Convert a biLM between the bilm-tf/AllenNLP layout and the native, pickle-free format. The source
    passes every check `verify` makes first, and the output records the source's format, file and digest."""
    target = to or ("bilm-tf" if is_native(source) else "native")
    if target not in ("native", "bilm-tf"):
        raise typer.BadParameter(f"--to must be 'native' or 'bilm-tf', got {target!r}")
    try:
        loaded = load_model(source, options_file=options, sha256=sha256)
    except (FileNotFoundError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    origin = {"format": loaded.source.kind, "file": loaded.source.weight_file.name, "sha256": loaded.sha256}
    if target == "native":
        save_native(loaded.bilm, output, converted_from=origin)
    else:
        output.mkdir(parents=True, exist_ok=True)
        save_bilm_tf(loaded.bilm, output / "options.json", output / "weights.hdf5", output / "vocab.txt", origin)
    typer.echo(f"wrote {target} model to {output} (from {origin['file']}, sha256 {origin['sha256']})")
