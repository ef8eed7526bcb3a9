"""`spacy elmo ...` and `python -m spacy_elmo ...`: one Typer app, one module a subcommand."""

import typer

elmo_cli = typer.Typer(
    name="elmo", help="ELMo biLMs: convert, verify, pretrain, evaluate, embed.", no_args_is_help=True
)


@elmo_cli.callback()
def _group() -> None:
    """ELMo biLMs for spaCy: convert, verify, pretrain, evaluate, embed."""


# Each subcommand registers itself on `elmo_cli` when imported. The modules import torch inside their
# commands, not at import: `spacy elmo embed --runtime onnxruntime` with an .onnx model runs without torch.
from . import convert, embed, evaluate, export, pretrain, verify  # noqa: E402,F401

try:  # as a spaCy CLI plugin: `spacy elmo ...`
    from spacy.cli._util import app as _spacy_app

    _spacy_app.add_typer(elmo_cli, name="elmo")
except ImportError:  # pragma: no cover - spaCy is a hard dependency; keep `python -m` working anyway
    pass


def main() -> None:
    elmo_cli(prog_name="python -m spacy_elmo")
