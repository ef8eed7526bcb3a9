"""`spacy elmo convert`: bilm-tf/AllenNLP options.json + HDF5 <-> the native format."""

from pathlib import Path
from typing import Optional

import typer

from ..io.hdf5 import save_bilm_tf
from ..io.native import is_native, save_native
from ..io.resolve import load_bilm
from . import elmo_cli


@elmo_cli.command("convert")
def convert_cli(
    source: Path = typer.Argument(..., help="A native model directory, or a bilm-tf/AllenNLP directory or .hdf5 file"),
    output: Path = typer.Argument(..., help="Output directory"),
    to: Optional[str] = typer.Option(None, "--to", help="'native' or 'bilm-tf' (default: the other format)"),
    options: Optional[Path] = typer.Option(None, "--options", help="options.json, if not beside the .hdf5"),
) -> None:
    """Convert a biLM between the bilm-tf/AllenNLP layout and the native, pickle-free format."""
    target = to or ("bilm-tf" if is_native(source) else "native")
    if target not in ("native", "bilm-tf"):
        raise typer.BadParameter(f"--to must be 'native' or 'bilm-tf', got {target!r}")
    try:
        bilm = load_bilm(source, options_file=options)
    except (FileNotFoundError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    if target == "native":
        save_native(bilm, output)
    else:
        output.mkdir(parents=True, exist_ok=True)
        save_bilm_tf(bilm, output / "options.json", output / "weights.hdf5", output / "vocab.txt")
    typer.echo(f"wrote {target} model to {output}")
