"""The `spacy elmo` command group: its help lists every command; bad `evaluate` options are one line."""

import re

import pytest
import torch
from typer.main import get_command
from typer.testing import CliRunner

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.cli import elmo_cli

runner = CliRunner()
TEXT = ELMO_FIXTURE / "vocab_test.txt"


def registered() -> set[str]:
    return set(get_command(elmo_cli).commands)  # type: ignore[attr-defined]


def listed(help_text: str) -> set[str]:
    return set(re.findall(r"[a-z][a-z-]*[a-z]", help_text))


def test_the_group_help_lists_every_registered_command():
    names = registered()
    assert {"convert", "verify", "export", "pretrain", "evaluate", "embed", "embed-merge"} <= names
    assert names <= listed(get_command(elmo_cli).help or "")
    done = runner.invoke(elmo_cli, ["--help"], terminal_width=400)
    assert done.exit_code == 0
    description = done.output.split("Usage:")[1].split("Options")[0]  # the text above the option panels
    assert names <= listed(description)


def test_spacys_cli_shows_the_same_help_for_elmo():
    from spacy.cli._util import app

    group = get_command(app).commands["elmo"]  # type: ignore[attr-defined]
    assert registered() <= listed(group.help or "")


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--threads", "-1", "--threads: -1: give a number of threads, or 0 for the runtime's default"),
        ("--device", "tpu", "--device: 'tpu' is not a device; use cpu, cuda or cuda:N"),
        ("--device", "mps", "--device: 'mps': spacy-elmo runs on cpu or cuda[:N], not mps"),
        ("--device", "cuda", "--device: 'cuda': this machine has no CUDA device that torch can use"),
    ],
)
def test_evaluate_refuses_a_bad_thread_count_or_device_in_one_line(monkeypatch, option, value, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a machine with a GPU
    done = runner.invoke(elmo_cli, ["evaluate", str(ELMO_FIXTURE), str(TEXT), option, value])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
    assert done.output.startswith(f"error: {message}") and len(done.output.strip().splitlines()) == 1, done.output


OPTIONS_ONLY = {"models"}  # commands that take no argument


def test_usage_lines_name_arguments_as_the_help_texts_do():
    """Required arguments as MODEL, optional ones as [OUTPUT]: no braces (typer 0.29 writes `{MODEL}`)."""
    for name in registered():
        usage = runner.invoke(elmo_cli, [name, "--help"], terminal_width=400).output
        line = next(line for line in usage.splitlines() if "Usage:" in line)
        pieces = line.split("[OPTIONS]")[1].split()
        assert (pieces or name in OPTIONS_ONLY) and not any("{" in p or "}" in p for p in pieces), (name, line)
        assert all(re.fullmatch(r"\[?[A-Z0-9_]+\]?(\.\.\.)?", p) for p in pieces), (name, line)


def test_embed_says_a_model_is_missing_before_any_progress_bar(tmp_path):
    text = tmp_path / "input.txt"
    text.write_text("A line to embed .\n", encoding="utf-8")
    done = runner.invoke(elmo_cli, ["embed", str(tmp_path / "no-such-model"), str(text), str(tmp_path / "out.hdf5")])
    assert done.exit_code == 1
    assert done.output.startswith("error: ") and "no-such-model" in done.output.splitlines()[0], done.output
    assert "lines" not in done.output and not (tmp_path / "out.hdf5").exists()
