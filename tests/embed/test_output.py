"""`spacy elmo embed`: every line embedded, layers reduced as asked, resumable, workers agree."""

import json
import subprocess
import sys

import h5py
import numpy
import pytest

from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.embed import EmbedSettings, embed_file

LINES = ["The cat sat on the mat .", "", "Ünïcödé 日本語 👍🏽 text", "x" * 300, "a b c d e f g h i j k"]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def read_all(path):
    with h5py.File(path, "r") as handle:
        return {key: handle[key][...] for key in handle.keys()}


def test_embeds_every_line_with_reference_values(reference_bilm, fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    assert embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), layers="all")) == len(LINES)
    data = read_all(out)
    assert sorted(data, key=int) == [str(i) for i in range(len(LINES))]
    expected = BiLMRunner(reference_bilm).embed_sentences([line.split() for line in LINES])
    for i, array in enumerate(expected):
        assert data[str(i)].shape == array.shape
        numpy.testing.assert_allclose(data[str(i)], array, atol=1e-6, rtol=0)
    assert data["1"].shape == (3, 0, 32)


@pytest.mark.parametrize("layers,reduce", [("top", lambda a: a[-1]), ("average", lambda a: a.mean(0))])
def test_top_and_average(fixture_dir, text_file, tmp_path, layers, reduce):
    all_layers = tmp_path / "all.hdf5"
    embed_file(text_file, all_layers, EmbedSettings(model=str(fixture_dir)))
    reduced = tmp_path / f"{layers}.hdf5"
    embed_file(text_file, reduced, EmbedSettings(model=str(fixture_dir), layers=layers))
    full, small = read_all(all_layers), read_all(reduced)
    for key in full:
        numpy.testing.assert_allclose(small[key], reduce(full[key]), atol=1e-6)


def test_resume_skips_written_lines(fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    settings = EmbedSettings(model=str(fixture_dir), chunk_size=2)
    first = text_file.with_name("first.txt")
    first.write_text("\n".join(LINES[:3]) + "\n", encoding="utf-8")
    assert embed_file(first, out, settings) == 3  # an interrupted run: the first 3 lines
    assert embed_file(text_file, out, settings) == 2  # resumed: only the rest
    assert sorted(read_all(out), key=int) == [str(i) for i in range(len(LINES))]
    with pytest.raises(ValueError, match="other settings"):
        embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), layers="top"))


def test_jsonl_and_errors(fixture_dir, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"text": "hello world"}) + "\n" + json.dumps({"body": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"in\.jsonl, line 2: no 'text' field \(set --text-field\)"):
        embed_file(path, tmp_path / "o.hdf5", EmbedSettings(model=str(fixture_dir)))
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        embed_file(tmp_path / "missing.txt", tmp_path / "o2.hdf5", EmbedSettings(model=str(fixture_dir)))


@pytest.mark.slow
def test_cli_with_two_workers_matches_one(fixture_dir, text_file, tmp_path):
    outputs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}.hdf5"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "spacy_elmo",
                "embed",
                str(fixture_dir),
                str(text_file),
                str(out),
                "--layers",
                "top",
                "--workers",
                str(workers),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(read_all(out))
    assert outputs[0].keys() == outputs[1].keys()
    for key in outputs[0]:
        numpy.testing.assert_allclose(outputs[0][key], outputs[1][key], atol=1e-6)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_embed_at_a_precision_is_the_runners(reference_bilm, fixture_dir, text_file, tmp_path, precision):
    out = tmp_path / "out.hdf5"
    embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), precision=precision))
    data = read_all(out)
    expected = BiLMRunner(reference_bilm, precision=precision).embed_sentences([line.split() for line in LINES])
    for i, array in enumerate(expected):
        assert data[str(i)].dtype == numpy.float32
        assert numpy.array_equal(data[str(i)], array)
    with h5py.File(out, "r") as handle:
        assert json.loads(handle.attrs["settings"])["precision"] == precision


def test_embed_refuses_a_bad_precision_before_reading_anything(fixture_dir, tmp_path):
    with pytest.raises(ValueError, match="--precision must be one of 'fp32', 'bf16', 'fp16', 'int8', got 'int4'"):
        EmbedSettings(model=str(fixture_dir), precision="int4")
    with pytest.raises(ValueError, match="CPU only"):
        EmbedSettings(model=str(fixture_dir), precision="int8", device="cuda:0")


@pytest.mark.parametrize(
    "setting,value,message",
    [
        ("n_threads", -1, "--threads must be an integer >= 0, got -1"),
        ("token_budget", 0, "--batch-tokens must be an integer >= 1, got 0"),
        ("token_budget", "2", "--batch-tokens must be an integer >= 1, got '2'"),
        ("dtype", "float64", "--dtype must be one of float32, float16, got 'float64'"),
        ("layers", "bottom", "--layers must be one of all, top, average, got 'bottom'"),
        ("precision", "fp16", "precision 'fp16' is for GPUs .* on the CPU use precision 'bf16' or 'fp32'"),
    ],
)
def test_a_bad_setting_names_the_option(fixture_dir, setting, value, message):
    with pytest.raises(ValueError, match=message):
        EmbedSettings(model=str(fixture_dir), **{setting: value})


def test_bad_cli_values_are_one_line_errors_not_tracebacks(fixture_dir, text_file, tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import elmo_cli

    for option, value, said in (
        ("--precision", "fp8", "--precision must be one of"),
        ("--threads", "-1", "--threads must be an integer >= 0"),
        ("--workers", "0", "--workers must be an integer >= 1"),
    ):
        out = tmp_path / f"{option[2:]}.hdf5"
        result = CliRunner().invoke(elmo_cli, ["embed", str(fixture_dir), str(text_file), str(out), option, value])
        assert result.exit_code == 1 and said in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert not out.exists(), "nothing is written for a refused setting"


def test_merging_a_file_that_is_not_hdf5_names_it(tmp_path):
    from spacy_elmo.embed import ShardError, merge_shards

    for name, content in (("truncated.hdf5", b"\x89HDF\r\n\x1a\n" + b"\0" * 20), ("text.hdf5", b"not hdf5")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ShardError, match=rf"{name}: not a readable HDF5 file"):
            merge_shards([tmp_path / name], tmp_path / "merged.hdf5")
    assert not (tmp_path / "merged.hdf5").exists()


def test_a_model_that_does_not_load_leaves_no_output(text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        embed_file(text_file, out, EmbedSettings(model=str(tmp_path / "nowhere")))
    assert not out.exists()


KILLED_BEFORE_THE_FIRST_CHUNK = r"""
import os, signal, sys
from pathlib import Path
import spacy_elmo.embed.output as output
from spacy_elmo.embed import EmbedSettings, embed_file

def die(chunk):
    os.kill(os.getpid(), signal.SIGKILL)  # after the model loaded and the output was created

output._embed_chunk = die
embed_file(Path(sys.argv[1]), Path(sys.argv[2]), EmbedSettings(model=sys.argv[3], chunk_size=2))
"""


@pytest.mark.slow
def test_killed_before_the_first_chunk_a_rerun_finishes_the_job(fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_THE_FIRST_CHUNK, str(text_file), str(out), str(fixture_dir)],
        capture_output=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    with h5py.File(out, "r") as handle:  # a valid, resumable file without lines
        assert not handle.attrs.get("complete", False) and not list(handle.keys())
    assert embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), chunk_size=2)) == len(LINES)
    embed_file(text_file, tmp_path / "whole.hdf5", EmbedSettings(model=str(fixture_dir), chunk_size=2))
    again, whole = read_all(out), read_all(tmp_path / "whole.hdf5")
    assert again.keys() == whole.keys() and all(numpy.array_equal(again[k], whole[k]) for k in whole)
