"""`spacy elmo ...` and `python -m spacy_elmo ...`: one Typer app, one module a subcommand."""

import typer

elmo_cli = typer.Typer(name="elmo", no_args_is_help=True)


@elmo_cli.callback()
def _group() -> None:
    """ELMo biLMs for spaCy (the help text is `elmo_cli.info.help`, set below from the commands)."""


# Each subcommand registers itself on `elmo_cli` when imported. The modules import torch inside their
# commands, not at import: `spacy elmo embed --runtime onnxruntime` with an .onnx model runs without torch.
from . import convert, embed, evaluate, export, pretrain, verify  # noqa: E402,F401


def command_names() -> list[str]:
    """Every registered subcommand, in the order registered."""
    return [
        command.name or typer.main.get_command_name(command.callback.__name__)
        for command in elmo_cli.registered_commands
        if command.callback is not None
    ]


# the help text lists the commands as registered, so a new one cannot be left out of it
elmo_cli.info.help = f"ELMo biLMs for spaCy: {', '.join(command_names())}."

try:  # as a spaCy CLI plugin: `spacy elmo ...`
    from spacy.cli._util import app as _spacy_app

    _spacy_app.add_typer(elmo_cli, name="elmo")
except ImportError:  # pragma: no cover - spaCy is a hard dependency; keep `python -m` working anyway
    pass


def main() -> None:
    elmo_cli(prog_name="python -m spacy_elmo")
