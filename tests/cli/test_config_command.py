"""`spacy elmo config`: the shipped configs from an installed package, printed or written, and a config
written so fills and validates with spaCy."""

from spacy.cli.init_config import fill_config
from typer.testing import CliRunner

from spacy_elmo.cli import elmo_cli
from spacy_elmo.cli.config import CONFIGS_DIR

runner = CliRunner()


def test_with_no_name_it_lists_every_shipped_config():
    done = runner.invoke(elmo_cli, ["config"])
    assert done.exit_code == 0, done.output
    listed = {line.split()[0] for line in done.output.splitlines()}
    assert listed == {path.stem for path in CONFIGS_DIR.glob("*.cfg")} >= {"elmo", "ner", "textcat", "pretrain_tiny"}


def test_a_name_prints_the_config_as_shipped():
    for name in ("ner", "textcat.cfg"):
        done = runner.invoke(elmo_cli, ["config", name])
        assert done.exit_code == 0, done.output
        assert done.stdout == (CONFIGS_DIR / f"{name.removesuffix('.cfg')}.cfg").read_text(encoding="utf-8")


def test_an_unknown_name_and_an_existing_output_are_refused(tmp_path):
    done = runner.invoke(elmo_cli, ["config", "parser"])
    assert done.exit_code == 1 and "no shipped config 'parser'; shipped: elmo, ner" in done.output
    mine = tmp_path / "base.cfg"
    mine.write_text("my own\n", encoding="utf-8")
    done = runner.invoke(elmo_cli, ["config", "ner", str(mine)])
    assert done.exit_code == 1 and "base.cfg exists" in done.output
    assert mine.read_text(encoding="utf-8") == "my own\n"


def test_a_written_config_fills_with_spacy(tmp_path):
    base, full = tmp_path / "base.cfg", tmp_path / "config.cfg"
    assert runner.invoke(elmo_cli, ["config", "textcat", str(base)]).exit_code == 0
    fill_config(full, base)  # `python -m spacy init fill-config base.cfg config.cfg`
    assert "spacy-elmo.ElmoListener.v1" in full.read_text(encoding="utf-8")
