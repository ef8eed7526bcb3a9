"""`spacy elmo export`: a biLM as one ONNX graph (the `[onnx]` extra), to serve without its framework."""

from pathlib import Path
from typing import Optional

import typer

from ..errors import named_settings, require
from . import PIN_OPTION, elmo_cli, one_line_errors


@elmo_cli.command("export")
def export_cli(
    model: str = typer.Argument(..., help="Any model the package loads (native, bilm-tf, NLPL .zip, ELMoForManyLangs)"),
    output: Path = typer.Argument(..., help="The .onnx file to write"),
    sha256: Optional[str] = PIN_OPTION,
) -> None:
    r"""Export the biLM as an ONNX graph: character ids (batch, length, width; 0 = no token) in, every layer
    (layers, batch, length, 2 x projection) out, fp32, stateless, any batch size and length (the LSTMs are
    ONNX Scans over the run-time length). Needs torch and the \[onnx] extra: `pip install ".\[onnx]"` in a
    clone (a missing package is named with the line that installs it)."""
    require("export", "torch", "onnx", "onnxscript", extra="onnx")  # before the model loads
    from ..disk import file_sha256
    from ..io.resolve import check_output, load_model
    from ..onnx.export import export_onnx

    with one_line_errors(), named_settings(path="MODEL", sha256="--sha256", output="OUTPUT"):
        loaded = load_model(model, sha256)
        check_output(loaded, output, directory=False)
    export_onnx(loaded.bilm, output, source_sha256=loaded.sha256)
    typer.echo(
        f"wrote {output} (ONNX graph, sha256 {file_sha256(output)}: the digest `model.sha256` pins; exported from "
        f"{loaded.source.path}, sha256 {loaded.sha256})"
    )
