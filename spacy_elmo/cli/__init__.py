"""`spacy elmo ...` and `python -m spacy_elmo ...`: one Typer app, one module a subcommand."""

import contextlib
import functools
import inspect
import re
from collections.abc import Iterator
from typing import Any, Callable

import typer
from typer.core import TyperCommand
from typer.models import ArgumentInfo

from ..errors import MissingPackageError, extra_providing, is_known, missing, missing_message

elmo_cli = typer.Typer(name="elmo", no_args_is_help=True)
PIN_OPTION = typer.Option(
    None, "--sha256", help="refuse the model unless its digest is this one (as `spacy elmo verify` prints it)"
)


@elmo_cli.callback()
def _group() -> None:
    """ELMo biLMs for spaCy (the help text is `elmo_cli.info.help`, set below from the commands)."""


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """A refused input or setting (the package raises a ValueError for each) as one `error:` line on
    stderr and exit status 1, not a traceback."""
    try:
        yield
    except (FileNotFoundError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


# Each subcommand registers itself on `elmo_cli` when imported. The modules import torch inside their
# commands, not at import: `spacy elmo embed --runtime onnxruntime` with an .onnx model runs without torch.
from . import config, convert, embed, evaluate, export, models, pretrain, verify  # noqa: E402,F401


class _UsageCommand(TyperCommand):
    """A command whose usage line writes a required argument as `MODEL`, the convention of man pages and of
    the commands' docstrings (typer 0.29 writes `{MODEL}`, which reads as a literal or a choice)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [re.sub(r"^\{([A-Z0-9_]+)\}", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]


def _naming_missing_packages(command: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`command`, with a package it imports that is not installed (torch or pooch where a serving install
    left them out, an extra's) said in one `error:` line naming the pip line, exit status 1, not a traceback.
    Commands `require` what they need before their work starts; this catches what any other path imports."""

    @functools.wraps(command)  # typer reads the parameters through __wrapped__
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ModuleNotFoundError as err:
            top = (err.name or "").split(".")[0]
            if isinstance(err, MissingPackageError):
                message = str(err)
            elif is_known(top) and missing(top):
                message = missing_message(name, [top], extra_providing(top))
            else:
                raise
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(1) from None

    return run


for _command in elmo_cli.registered_commands:
    if _command.callback is not None:
        # arguments shown as MODEL, INPUT_PATH, as the commands' docstrings name them (typer's default is the
        # parameter's name, which reads as literal text: `{model} {input_path}`)
        for _parameter in inspect.signature(_command.callback).parameters.values():
            if isinstance(_parameter.default, ArgumentInfo) and _parameter.default.metavar is None:
                _parameter.default.metavar = _parameter.name.upper()
        _command.callback = _naming_missing_packages(_command.callback, str(_command.name))
    _command.cls = _UsageCommand
# the help text lists the commands as registered, so a new one cannot be left out of it
elmo_cli.info.help = (
    f"ELMo biLMs for spaCy: {', '.join(str(command.name) for command in elmo_cli.registered_commands)}."
)
from spacy.cli._util import app as _spacy_app  # noqa: E402

_spacy_app.add_typer(elmo_cli, name="elmo")  # as a spaCy CLI plugin: `spacy elmo ...`


def main() -> None:
    elmo_cli(prog_name="python -m spacy_elmo")
