"""`spacy elmo config NAME [OUTPUT]`: a config shipped in the package, from wherever it is installed, so
that `spacy init fill-config` and `spacy_elmo pretrain` need no clone of the repository."""

from pathlib import Path
from typing import Optional

import typer

from . import elmo_cli, one_line_errors

CONFIGS_DIR = Path(__file__).parent.parent / "configs"


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
        configs = {path.stem: path for path in sorted(CONFIGS_DIR.glob("*.cfg"))}
        if name is None:
            for stem, path in configs.items():
                typer.echo(f"{stem:20} {path}")
            return
        shipped = configs.get(name.removesuffix(".cfg"))
        if shipped is None:
            raise FileNotFoundError(f"no shipped config {name!r}; shipped: {', '.join(configs)}")
        text = shipped.read_text(encoding="utf-8")
        if output is None:
            typer.echo(text, nl=False)
            return
        if output.exists():
            raise ValueError(f"{output} exists; give another name or remove it first")
        output.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output}", err=True)
