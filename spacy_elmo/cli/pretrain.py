"""`spacy elmo pretrain CONFIG OUTPUT_DIR`: train or fine-tune a biLM language model on raw text."""

from pathlib import Path
from typing import Optional

import typer

from . import elmo_cli, one_line_errors
from .config import CONFIGS_DIR


def resolve_config_path(path: Path) -> Path:
    """A config file, or the name of one shipped in spacy_elmo/configs (e.g. pretrain_tiny.cfg)."""
    if path.exists():
        return path
    shipped = CONFIGS_DIR / path.name
    if shipped.exists() and path.name == str(path):
        return shipped
    available = ", ".join(sorted(p.name for p in CONFIGS_DIR.glob("pretrain_*.cfg")))
    raise FileNotFoundError(f"config not found: {path} (shipped configs: {available})")


@elmo_cli.command("pretrain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def pretrain_cli(
    ctx: typer.Context,
    config_path: Path = typer.Argument(
        ..., help="Pretraining config (.cfg), or a shipped one: pretrain_tiny.cfg, pretrain_en_small.cfg"
    ),
    output_dir: Path = typer.Argument(..., help="Output directory: model/, checkpoints/, metrics.jsonl"),
    resume: bool = typer.Option(False, "--resume", help="Continue from the newest readable checkpoint in OUTPUT_DIR"),
    accept_changed_data: bool = typer.Option(
        False,
        "--accept-changed-data",
        help="With --resume: continue although the training or dev data changed since the checkpoint "
        "(logged, and recorded in metrics.jsonl); without it such a resume is refused",
    ),
    init_from: Optional[str] = typer.Option(
        None,
        "--init-from",
        help="Start from these weights (native or bilm-tf/AllenNLP; a new softmax if they have none)",
    ),
) -> None:
    """Train a biLM (forward + backward LM, shared sampled softmax). Overrides: --training.max_steps 100.

    Several GPUs or nodes: run it under `torchrun --nproc_per_node N -m spacy_elmo pretrain ...`.
    """
    from spacy.cli._util import parse_config_overrides

    from ..pretrain import load_config, pretrain

    with one_line_errors():  # the config, corpus and vocabulary errors are ValueErrors
        overrides = parse_config_overrides(ctx.args)
        path = resolve_config_path(config_path)
        config = load_config(path, overrides)
        pretrain(
            config,
            output_dir,
            resume=resume,
            init_from=init_from,
            log=typer.echo,
            source=str(path),
            accept_changed_data=accept_changed_data,
        )
