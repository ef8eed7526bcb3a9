"""`spacy elmo embed` leaves nothing behind when it fails before embedding anything: a setting refused
(an unknown --tokenizer language) before any file is created, and a run that fails before its first chunk
is kept removes the OUTPUT.partial/ it started; a run stopped after a chunk keeps its work for the re-run
that resumes it, as a killed one does (tests/embed/test_output.py)."""

import re

import h5py
import pytest
from typer.testing import CliRunner

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.embed import output
from spacy_elmo.embed.store import partial_dir

LINES = ["The first line .", "A second one", "and a third", "a fourth", "the fifth ."]


def embed(input_path, out, *options):
    from spacy_elmo.cli import elmo_cli

    return CliRunner().invoke(elmo_cli, ["embed", str(ELMO_FIXTURE), str(input_path), str(out), *options])


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def left_behind(tmp_path):
    """Every name in the folder but the input's."""
    return sorted(path.name for path in tmp_path.iterdir() if path.name != "input.txt")


@pytest.mark.parametrize(
    "out,options",
    [("out.hdf5", []), ("out.parquet", []), ("out.hdf5", ["--shard", "1/2"]), ("out.hdf5", ["--workers", "2"])],
)
def test_an_unknown_tokenizer_language_is_refused_before_any_output_exists(text_file, tmp_path, out, options):
    done = embed(text_file, tmp_path / out, "--tokenizer", "zz", *options)
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
    errors = re.findall(r"error: [^\r\n]*", done.output)
    assert len(errors) == 1 and "--tokenizer is 'zz', which spaCy does not know" in errors[0], done.output
    assert left_behind(tmp_path) == []


def test_a_run_failing_before_its_first_chunk_leaves_no_partial_directory(text_file, tmp_path, monkeypatch):
    def fail(chunk):
        raise RuntimeError("the first chunk failed")

    monkeypatch.setattr(output, "_embed_chunk", fail)
    done = embed(text_file, tmp_path / "out.hdf5", "--chunk-lines", "2")
    assert isinstance(done.exception, RuntimeError) and str(done.exception) == "the first chunk failed"
    assert left_behind(tmp_path) == []


def test_a_run_failing_after_a_chunk_keeps_it_and_a_rerun_resumes(text_file, tmp_path, monkeypatch):
    """Existing behaviour kept: the chunk finished stays in OUTPUT.partial/, a re-run embeds only the rest,
    and the same re-run's failure before a chunk of its own leaves that work as it was."""
    embed_chunk, calls = output._embed_chunk, []

    def fail_after(n):
        def embed_or_fail(chunk):
            calls.append(chunk)
            if len(calls) > n:
                raise RuntimeError("stopped")
            return embed_chunk(chunk)

        monkeypatch.setattr(output, "_embed_chunk", embed_or_fail)

    out = tmp_path / "out.hdf5"
    fail_after(1)
    assert isinstance(embed(text_file, out, "--chunk-lines", "2").exception, RuntimeError)
    kept = sorted(path.name for path in partial_dir(out).iterdir())
    assert kept == ["binding.json", "chunk-000000000.hdf5"] and not out.exists()
    calls.clear()
    fail_after(0)  # a resumed run that fails at once: the work of the run it resumes is not its own to remove
    assert isinstance(embed(text_file, out, "--chunk-lines", "2").exception, RuntimeError)
    assert sorted(path.name for path in partial_dir(out).iterdir()) == kept
    monkeypatch.setattr(output, "_embed_chunk", embed_chunk)
    done = embed(text_file, out, "--chunk-lines", "2")
    assert done.exit_code == 0 and "embedded 3 lines now" in done.output, done.output
    with h5py.File(out, "r") as handle:
        assert sorted(handle, key=int) == [str(i) for i in range(len(LINES))]
    assert left_behind(tmp_path) == ["out.hdf5"]
