"""`embed --shard I/N` across processes and `embed-merge`: the same file as one run, every line once."""

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy
import pytest

from fixture_paths import ELMO_FIXTURE
from kills import at_call, at_nth_dataset, run_killed, sha256_of
from spacy_elmo.embed import EmbedSettings, ShardError, embed_file, merge_shards, output
from spacy_elmo.embed.shards import shard_path
from spacy_elmo.embed.store import PartialRun, partial_dir

LINES = [f"line {i} of the corpus , with {'more ' * (i % 4)}words ." for i in range(11)] + ["", "last"]


def read_all(path):
    with h5py.File(path, "r") as handle:
        return {key: handle[key][...] for key in handle.keys()}, json.loads(handle.attrs["binding"])["settings"]


def cli(*args, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "spacy_elmo", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(process):
    out, err = process.communicate(timeout=240)
    assert process.returncode == 0, err[-3000:]
    return out


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
def test_three_shard_processes_merged_equal_one_run_bit_for_bit(corpus, tmp_path):
    single = tmp_path / "single.hdf5"
    finish(cli("embed", ELMO_FIXTURE, corpus, single))
    out = tmp_path / "out.hdf5"
    shards = [cli("embed", ELMO_FIXTURE, corpus, out, "--shard", f"{i}/3") for i in (0, 1)]
    # the third shard from the environment, as torchrun or a cluster launcher would set it
    shards.append(cli("embed", ELMO_FIXTURE, corpus, out, env={**os.environ, "RANK": "2", "WORLD_SIZE": "3"}))
    for process in shards:
        finish(process)
    files = [shard_path(out, (i, 3)) for i in range(3)]
    assert all(f.exists() for f in files) and not out.exists()
    assert "13 lines" in finish(cli("embed-merge", out, *files))
    merged, merged_settings = read_all(out)
    expected, expected_settings = read_all(single)
    assert merged_settings == expected_settings
    assert sha256_of(out) == sha256_of(single)  # the very file one run writes
    assert sorted(merged, key=int) == [str(i) for i in range(len(LINES))] == sorted(expected, key=int)
    for key, array in expected.items():
        assert merged[key].dtype == array.dtype and numpy.array_equal(merged[key], array), key


def test_missing_duplicated_and_incomplete_shards_are_named(corpus, tmp_path):
    out = tmp_path / "out.hdf5"
    settings = EmbedSettings(model=str(ELMO_FIXTURE))
    for i in range(3):
        embed_file(corpus, out, settings, shard=(i, 3))
    files = [shard_path(out, (i, 3)) for i in range(3)]
    with pytest.raises(ShardError, match=r"missing shard\(s\) \[1\] of 3: expected .*out.shard1-of-3.hdf5"):
        merge_shards([files[0], files[2]], out)
    copy = tmp_path / "copy.hdf5"
    shutil.copy(files[2], copy)
    with pytest.raises(ShardError, match=rf"shard 2 of 3 given twice: {files[2]} and {copy}"):
        merge_shards([*files, copy], out)
    partial_dir(files[1]).mkdir()  # shard 1 killed before it finished: no file, its work beside it
    files[1].unlink()
    with pytest.raises(FileNotFoundError, match=rf"{files[1]} \(its unfinished work is in .*: run that shard again"):
        merge_shards(files, out)
    assert not out.exists()


SHARD_KILL_POINTS = {
    "before the model loads": at_call(output, "load_embed_model"),
    "while writing the first chunk": at_nth_dataset(1),
    "between chunks": at_call(PartialRun, "write_chunk", after=True, n=2),
    "while assembling the shard": at_nth_dataset(8),  # shard 1 of 2 holds 6 lines
}


@pytest.mark.slow
@pytest.mark.parametrize("point", SHARD_KILL_POINTS)
def test_a_killed_shard_rerun_then_merged_is_the_single_run(corpus, tmp_path, point):
    settings = EmbedSettings(model=str(ELMO_FIXTURE), chunk_size=2)
    single = tmp_path / "single.hdf5"
    embed_file(corpus, single, settings)
    out = tmp_path / "out.hdf5"
    run_killed(lambda: embed_file(corpus, out, settings, shard=(1, 2)), SHARD_KILL_POINTS[point])
    assert not shard_path(out, (1, 2)).exists()
    embed_file(corpus, out, settings, shard=(0, 2))
    with pytest.raises(FileNotFoundError, match="missing|not found"):
        merge_shards([shard_path(out, (i, 2)) for i in range(2)], out)
    embed_file(corpus, out, settings, shard=(1, 2))  # the same command again
    assert merge_shards([shard_path(out, (i, 2)) for i in range(2)], out) == len(LINES)
    assert sha256_of(out) == sha256_of(single)


@pytest.mark.slow
def test_a_merge_killed_while_writing_leaves_nothing_and_runs_again(corpus, tmp_path):
    settings = EmbedSettings(model=str(ELMO_FIXTURE))
    single = tmp_path / "single.hdf5"
    embed_file(corpus, single, settings)
    out = tmp_path / "out.hdf5"
    files = [shard_path(out, (i, 2)) for i in range(2)]
    for i in range(2):
        embed_file(corpus, out, settings, shard=(i, 2))
    run_killed(lambda: merge_shards(files, out), at_nth_dataset(5))
    assert not out.exists()
    assert merge_shards(files, out) == len(LINES)
    assert sha256_of(out) == sha256_of(single)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["corpus.txt", "single.hdf5", "out.hdf5", *(f.name for f in files)]
    )


@pytest.fixture
def two_shards(corpus, tmp_path):
    out = tmp_path / "out.hdf5"
    settings = EmbedSettings(model=str(ELMO_FIXTURE))
    for i in range(2):
        embed_file(corpus, out, settings, shard=(i, 2))
    return out, [shard_path(out, (i, 2)) for i in range(2)]


def test_merge_refuses_a_shard_of_a_model_changed_in_place(corpus, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(ELMO_FIXTURE, model)
    out = tmp_path / "out.hdf5"
    embed_file(corpus, out, EmbedSettings(model=str(model)), shard=(0, 2))
    with h5py.File(model / "lm_weights.hdf5", "a") as handle:  # updated in place: same path, other weights
        name = next(n for n in _datasets(handle) if handle[n].dtype.kind == "f")
        handle[name][...] = handle[name][...] * 0.5
    embed_file(corpus, out, EmbedSettings(model=str(model)), shard=(1, 2))
    with pytest.raises(
        ShardError, match=r"out\.shard1-of-2\.hdf5: does not belong with .*model\.sha256: '[0-9a-f]{64}' then"
    ):
        merge_shards([shard_path(out, (i, 2)) for i in range(2)], out)
    assert not out.exists()


def test_merge_refuses_a_shard_of_an_edited_input(corpus, tmp_path):
    out = tmp_path / "out.hdf5"
    settings = EmbedSettings(model=str(ELMO_FIXTURE))
    embed_file(corpus, out, settings, shard=(0, 2))
    corpus.write_text("\n".join(["an edited line", *LINES[1:]]) + "\n", encoding="utf-8")
    embed_file(corpus, out, settings, shard=(1, 2))
    with pytest.raises(ShardError, match=r"does not belong with .*input\.sha256"):
        merge_shards([shard_path(out, (i, 2)) for i in range(2)], out)
    assert not out.exists()


def test_merge_refuses_a_shard_with_a_flipped_bit(two_shards, flip_a_bit):
    out, files = two_shards
    flip_a_bit(files[1], "3")  # line 3's data
    with pytest.raises(
        ShardError, match=rf"{files[1]}: its datasets have SHA-256 .* damaged or edited after it was written"
    ):
        merge_shards(files, out)
    assert not out.exists() and not list(out.parent.glob("out.hdf5.tmp*"))


def test_merge_refuses_a_shard_of_other_settings(corpus, tmp_path):
    out = tmp_path / "out.hdf5"
    embed_file(corpus, out, EmbedSettings(model=str(ELMO_FIXTURE)), shard=(0, 2))
    embed_file(corpus, out, EmbedSettings(model=str(ELMO_FIXTURE), layers="top"), shard=(1, 2))
    with pytest.raises(ShardError, match=r"settings\.layers: 'all' then, 'top' now"):
        merge_shards([shard_path(out, (i, 2)) for i in range(2)], out)


def _datasets(handle):
    names = []
    handle.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    return names


def test_shard_spec_errors():
    from spacy_elmo.embed.shards import parse_shard, shard_from_env
    from spacy_elmo.runtimes.torch import device_for_rank

    assert parse_shard("2/4") == (2, 4)
    with pytest.raises(ValueError, match="--shard must be I/N"):
        parse_shard("two")
    with pytest.raises(ValueError, match=r"the index must be in 0..3"):
        parse_shard("4/4")
    assert shard_from_env({"RANK": "1", "WORLD_SIZE": "4"}) == (1, 4) and shard_from_env({}) is None
    assert device_for_rank("cuda", {"LOCAL_RANK": "3"}) == "cuda:3" and device_for_rank("cuda:1", {}) == "cuda:1"


@pytest.mark.slow
def test_a_killed_shard_process_resumes_and_merges(tmp_path):
    """SIGKILL in the middle of a shard (after some chunks were flushed), then the same command again."""
    import re
    import signal

    corpus = tmp_path / "big.txt"
    n_lines, chunk = 3000, 128
    corpus.write_text("".join(f"word{i} and {i % 7} more words here .\n" for i in range(n_lines)), encoding="utf-8")
    out = tmp_path / "out.hdf5"
    shard = shard_path(out, (0, 2))
    process = cli("embed", ELMO_FIXTURE, corpus, out, "--shard", "0/2", "--chunk-lines", chunk)
    seen = ""
    while process.poll() is None:  # tqdm's progress on stderr: kill once a chunk has been written
        seen += process.stderr.read(64)
        done = [int(n) for n in re.findall(r"(\d+) lines", seen)]
        if done and max(done) >= chunk:
            process.send_signal(signal.SIGKILL)
            break
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the shard finished before it could be killed: make it longer"
    assert not shard.exists()
    assert 0 < len(list(partial_dir(shard).glob("chunk-*.hdf5"))) < n_lines // 2 // chunk + 1
    finish(cli("embed", ELMO_FIXTURE, corpus, out, "--shard", "0/2", "--chunk-lines", chunk))  # resumed
    finish(cli("embed", ELMO_FIXTURE, corpus, out, "--shard", "1/2", "--chunk-lines", chunk))
    finish(cli("embed-merge", out, shard, shard_path(out, (1, 2))))
    merged, _ = read_all(out)
    assert sorted(merged, key=int) == [str(i) for i in range(n_lines)]
    single = tmp_path / "single.hdf5"
    embed_file(corpus, single, EmbedSettings(model=str(ELMO_FIXTURE), chunk_size=chunk))
    expected, _ = read_all(single)
    assert all(numpy.array_equal(merged[k], expected[k]) for k in expected)


def test_merge_never_writes_over_a_shard_a_directory_or_another_file(corpus, two_shards, tmp_path):
    """The output of `embed-merge` replaced whatever was there: one of its own shards, a finished output of
    another input, a user's text file."""
    out, files = two_shards
    before = {path: sha256_of(path) for path in files}
    for given in (files[0], tmp_path / "." / files[1].name):
        with pytest.raises(ValueError, match=rf"{given}: OUTPUT is the shard file .*; give another output name"):
            merge_shards(files, given)
    (tmp_path / "merged").mkdir()
    with pytest.raises(ValueError, match="merged: OUTPUT is a directory"):
        merge_shards(files, tmp_path / "merged")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"notes.txt: OUTPUT exists and is not an embed output \(not HDF5\)"):
        merge_shards(files, notes)
    other_input = tmp_path / "other.txt"
    other_input.write_text("another text .\n", encoding="utf-8")
    other = tmp_path / "other.hdf5"
    embed_file(other_input, other, EmbedSettings(model=str(ELMO_FIXTURE)))
    other_sha = sha256_of(other)
    with pytest.raises(ValueError, match=r"other.hdf5 already holds a finished output of another .*input\.sha256"):
        merge_shards(files, other)
    assert notes.read_text(encoding="utf-8") == "my notes\n" and sha256_of(other) == other_sha
    assert {path: sha256_of(path) for path in files} == before and list((tmp_path / "merged").iterdir()) == []


def test_the_same_merge_run_again_finds_its_output_finished(corpus, two_shards, flip_a_bit):
    """As `embed` run again on its finished output: checked, said finished, not written again."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import elmo_cli

    out, files = two_shards
    assert merge_shards(files, out) == len(LINES)
    written = (out.stat().st_ino, out.stat().st_mtime_ns, sha256_of(out))
    assert merge_shards(files, out) == 0
    result = CliRunner().invoke(elmo_cli, ["embed-merge", str(out), *map(str, files)])
    assert result.exit_code == 0 and f"merged 0 lines now; {out} is finished" in result.output, result.output
    assert (out.stat().st_ino, out.stat().st_mtime_ns, sha256_of(out)) == written
    flip_a_bit(out, "3")  # damaged since: refused as `embed` refuses its damaged output
    with pytest.raises(ValueError, match=rf"{out}: its datasets have SHA-256 .*delete it and run again"):
        merge_shards(files, out)
