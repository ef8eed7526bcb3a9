"""`spacy elmo config NAME [OUTPUT]`: a config shipped in the package, from wherever it is installed, so
that `spacy init fill-config` and `spacy_elmo pretrain` need no clone of the repository."""

from pathlib import Path
from typing import Optional

import typer

from . import elmo_cli, one_line_errors

CONFIGS_DIR = Path(__file__).parent.parent / "configs"


def shipped_configs() -> dict[str, Path]:
    """The shipped configs by name (the file name without .cfg)."""
    return {path.stem: path for path in sorted(CONFIGS_DIR.glob("*.cfg"))}


def shipped_config(name: str) -> Path:
    """A shipped config by name, with or without .cfg; an unknown name is an error listing the known ones."""
    configs = shipped_configs()
    stem = name[: -len(".cfg")] if name.endswith(".cfg") else name
    if stem not in configs:
        raise FileNotFoundError(f"no shipped config {name!r}; shipped: {', '.join(configs)}")
    return configs[stem]


@elmo_cli.command("config")
def config_cli(
    name: Optional[str] = typer.Argument(
        None, help="ner, textcat (pipeline base configs), elmo (the component, every setting), pretrain_tiny, ..."
    ),
    output: Optional[Path] = typer.Argument(None, help="Write it here (an existing file is kept); default: stdout"),
) -> None:
    """Print or write a config shipped in the package; with no NAME, list them. For a pipeline:
    `config ner base.cfg`, then `python -m spacy init fill-config base.cfg config.cfg`."""
    with one_line_errors():
        if name is None:
            for stem, path in shipped_configs().items():
                typer.echo(f"{stem:20} {path}")
            return
        text = shipped_config(name).read_text(encoding="utf-8")
        if output is None:
            typer.echo(text, nl=False)
            return
        if output.exists():
            raise ValueError(f"{output} exists; give another name or remove it first")
        output.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output}", err=True)
