"""`spacy elmo convert`: bilm-tf/AllenNLP options.json + HDF5, NLPL archives and ELMoForManyLangs models
-> the native format, and native -> bilm-tf."""

from pathlib import Path
from typing import Optional

import typer

from ..errors import named_settings
from . import PIN_OPTION, elmo_cli, one_line_errors

TARGETS = ("native", "bilm-tf")


@elmo_cli.command("convert")
def convert_cli(
    source: Path = typer.Argument(
        ...,
        help="A native model directory, a bilm-tf/AllenNLP directory, .hdf5 or .zip, or an ELMoForManyLangs directory",
    ),
    output: Path = typer.Argument(..., help="Output directory"),
    to: Optional[str] = typer.Option(
        None,
        "--to",
        help="'native' or 'bilm-tf' (default: native, and bilm-tf for a native model)",
    ),
    options: Optional[Path] = typer.Option(None, "--options", help="options.json, if not beside the .hdf5"),
    sha256: Optional[str] = PIN_OPTION,
) -> None:
    """Convert a biLM (bilm-tf/AllenNLP, an NLPL archive, ELMoForManyLangs) to the native, pickle-free
    format, or a native one back to the bilm-tf/AllenNLP layout. The source passes every check `verify`
    makes first, and the output records the source's format, file and digest."""
    if to is not None and to not in TARGETS:
        raise typer.BadParameter(f"--to must be one of {', '.join(TARGETS)}, got {to!r}")
    from ..io.hdf5 import save_bilm_tf  # torch: imported by the command (see cli/__init__)
    from ..io.native import save_native
    from ..io.resolve import check_output, load_model

    with one_line_errors():
        with named_settings(path="SOURCE", sha256="--sha256", output="OUTPUT"):
            loaded = load_model(source, sha256, options_file=options)
            check_output(loaded, output, directory=True)
        target = to or ("native" if loaded.source.kind != "native" else "bilm-tf")
        origin = loaded.provenance()
        if target == "native":
            save_native(loaded.bilm, output, converted_from=origin)
        else:  # a model the layout cannot hold is refused before anything is written
            save_bilm_tf(loaded.bilm, output / "options.json", output / "weights.hdf5", output / "vocab.txt", origin)
        written = load_model(output).sha256  # what `verify OUTPUT` prints and a pin (`sha256`) takes
    typer.echo(
        f"wrote {target} model to {output}: model digest {written} (as `verify` prints it, for a pin); from "
        f"{origin['file']}, model digest {loaded.sha256}"
    )
