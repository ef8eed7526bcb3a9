"""Files that outlive a run are checked by content before they are used: every chunk under OUTPUT.partial/
carries its own digest (a damaged one is embedded again, never published), and a re-run of a finished
output checks its recorded `vectors_sha256`."""

import re

import h5py
import pytest
from typer.testing import CliRunner

from fixture_paths import ELMO_FIXTURE
from kills import sha256_of
from spacy_elmo.cli import elmo_cli
from spacy_elmo.embed import EmbedSettings, EmbedWarning, embed_file
from spacy_elmo.embed.store import OutputError, PartialRun, chunk_file, partial_dir

LINES = [f"line {i} says {'more ' * (i % 3)}words ." for i in range(7)]
SETTINGS = EmbedSettings(model=str(ELMO_FIXTURE), chunk_size=2)


class Stop(Exception):
    pass


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def whole(corpus, tmp_path):
    """The file of a run that nothing interrupted or damaged."""
    path = tmp_path / "whole" / "out.hdf5"
    embed_file(corpus, path, SETTINGS)
    return path


def stopped_after(corpus, out, n_chunks):
    """A run stopped once `n_chunks` chunks were written, as a kill leaves it."""
    written = []

    def progress(n):
        written.append(n)
        if len(written) == n_chunks:
            raise Stop

    with pytest.raises(Stop):
        embed_file(corpus, out, SETTINGS, progress=progress)
    assert not out.exists() and chunk_file(partial_dir(out), n_chunks - 1).exists()


def embed_cli(corpus, out):
    args = ["embed", str(ELMO_FIXTURE), str(corpus), str(out), "--chunk-lines", "2"]
    return CliRunner().invoke(elmo_cli, args)


def test_a_chunk_damaged_between_runs_is_embedded_again_and_said(corpus, whole, tmp_path, flip_a_bit):
    out = tmp_path / "out.hdf5"
    stopped_after(corpus, out, 2)
    damaged = chunk_file(partial_dir(out), 1)
    flip_a_bit(damaged, "2")  # line 2, in chunk 1
    with pytest.warns(EmbedWarning, match=rf"{damaged}: damaged \(its datasets have SHA-256 .*embedded again"):
        assert embed_file(corpus, out, SETTINGS) == len(LINES) - 2  # chunk 0 kept, chunk 1 embedded again
    assert sha256_of(out) == sha256_of(whole)


def test_the_cli_says_on_stderr_which_chunk_it_embeds_again(corpus, whole, tmp_path, flip_a_bit):
    out = tmp_path / "out.hdf5"
    stopped_after(corpus, out, 1)
    damaged = chunk_file(partial_dir(out), 0)
    flip_a_bit(damaged, "1")
    result = embed_cli(corpus, out)
    assert result.exit_code == 0, result.output
    said = re.findall(r"warning: [^\r\n]*", result.stderr)
    assert len(said) == 1 and str(damaged) in said[0] and "embedded again" in said[0], result.stderr
    assert sha256_of(out) == sha256_of(whole)


def test_a_chunk_without_a_digest_is_embedded_again(corpus, whole, tmp_path):
    """A chunk that cannot be checked (its digest removed) is not trusted."""
    out = tmp_path / "out.hdf5"
    stopped_after(corpus, out, 2)
    with h5py.File(chunk_file(partial_dir(out), 0), "r+") as handle:
        handle.attrs.pop("vectors_sha256", None)
    with pytest.warns(EmbedWarning, match=r"chunk-000000000\.hdf5: damaged \(.*written with no digest\)"):
        assert embed_file(corpus, out, SETTINGS) == len(LINES) - 2
    assert sha256_of(out) == sha256_of(whole)


def test_a_chunk_damaged_during_the_run_is_refused_at_assembly(corpus, whole, tmp_path, monkeypatch, flip_a_bit):
    out = tmp_path / "out.hdf5"
    publish = PartialRun.publish

    def damage_then_publish(self, *args):
        flip_a_bit(chunk_file(self.directory, 1), "3")
        publish(self, *args)

    monkeypatch.setattr(PartialRun, "publish", damage_then_publish)
    damaged = chunk_file(partial_dir(out), 1)
    with pytest.raises(OutputError, match=rf"{damaged}: its datasets have SHA-256 .*but the recorded digest is"):
        embed_file(corpus, out, SETTINGS)
    assert not out.exists() and not list(out.parent.glob("out.hdf5.tmp*")), "nothing damaged is published"
    monkeypatch.undo()
    with pytest.warns(EmbedWarning, match=rf"{damaged}: damaged"):
        assert embed_file(corpus, out, SETTINGS) == 2  # the same command again: only that chunk is embedded
    assert sha256_of(out) == sha256_of(whole)


def test_a_rerun_of_a_damaged_finished_output_is_refused(corpus, tmp_path, flip_a_bit):
    out = tmp_path / "out.hdf5"
    embed_file(corpus, out, SETTINGS)
    assert embed_file(corpus, out, SETTINGS) == 0  # undamaged: finished, nothing to do
    flip_a_bit(out, "4")
    before = sha256_of(out)
    with pytest.raises(
        OutputError,
        match=rf"{out}: its datasets have SHA-256 [0-9a-f]{{64}}, but the recorded digest is [0-9a-f]{{64}}",
    ):
        embed_file(corpus, out, SETTINGS)
    result = embed_cli(corpus, out)
    assert result.exit_code == 1 and (result.exception is None or isinstance(result.exception, SystemExit))
    said = re.findall(r"error: [^\r\n]*", result.stderr)
    assert len(said) == 1 and "the output was damaged or edited after it was written" in said[0], result.stderr
    assert sha256_of(out) == before, "a refused output is left as it is"
