"""`spacy elmo export` run in this process, with what it said: its output, and every warning and torch
exporter log record it raised (an export is expected to say nothing of torch's own noise)."""

import logging
import warnings
from pathlib import Path

from typer.testing import CliRunner

from spacy_elmo.cli import elmo_cli

EXPORTER_LOG = "torch.onnx._internal.exporter._registration"


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def export_with_cli(model: str, target: Path) -> tuple[str, list[str]]:
    """`spacy elmo export MODEL TARGET`; its output and what it warned or logged. Fails if it failed."""
    exporter_log, records = logging.getLogger(EXPORTER_LOG), Records()
    exporter_log.addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            done = CliRunner().invoke(elmo_cli, ["export", model, str(target)])
    finally:
        exporter_log.removeHandler(records)
    assert done.exit_code == 0, done.output
    return done.output, [str(w.message) for w in shown] + records.messages
