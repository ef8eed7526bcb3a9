"""`embed --shard I/N` across processes and `embed-merge`: the same file as one run, every line once."""

import os
import shutil
import subprocess
import sys

import h5py
import numpy
import pytest

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.embed import EmbedSettings, ShardError, embed_file, merge_shards, shard_path

LINES = [f"line {i} of the corpus , with {'more ' * (i % 4)}words ." for i in range(11)] + ["", "last"]


def read_all(path):
    with h5py.File(path, "r") as handle:
        return {key: handle[key][...] for key in handle.keys()}, handle.attrs["settings"]


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
    with h5py.File(files[1], "a") as handle:
        handle.attrs["complete"] = False
    with pytest.raises(ShardError, match=rf"{files[1]}: shard 1 of 3 is incomplete: run it again to resume it"):
        merge_shards(files, out)
    assert not out.exists()


def test_an_interrupted_shard_resumes(corpus, tmp_path):
    out = tmp_path / "out.hdf5"
    settings = EmbedSettings(model=str(ELMO_FIXTURE), chunk_size=1)
    first_part = tmp_path / "first.txt"
    first_part.write_text("\n".join(LINES[:5]) + "\n", encoding="utf-8")
    assert embed_file(first_part, out, settings, shard=(1, 2)) == 2  # lines 1 and 3, then stopped
    assert embed_file(corpus, out, settings, shard=(1, 2)) == 4  # resumed: lines 5, 7, 9, 11 only
    embed_file(corpus, out, settings, shard=(0, 2))
    assert merge_shards([shard_path(out, (i, 2)) for i in range(2)], out) == len(LINES)
    single = tmp_path / "single.hdf5"
    embed_file(corpus, single, settings)
    merged, _ = read_all(out)
    expected, _ = read_all(single)
    assert all(numpy.array_equal(merged[k], expected[k]) for k in expected) and merged.keys() == expected.keys()


def test_shard_spec_errors():
    from spacy_elmo.embed import device_for_rank, parse_shard, shard_from_env

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
    corpus.write_text("".join(f"word{i} and {i % 7} more words here .\n" for i in range(16000)), encoding="utf-8")
    out = tmp_path / "out.hdf5"
    shard = shard_path(out, (0, 2))
    process = cli("embed", ELMO_FIXTURE, corpus, out, "--shard", "0/2")
    seen = ""
    while process.poll() is None:  # tqdm's progress on stderr: kill once a chunk has been written
        seen += process.stderr.read(64)
        done = [int(n) for n in re.findall(r"(\d+) lines", seen)]
        if done and max(done) >= 256:
            process.send_signal(signal.SIGKILL)
            break
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the shard finished before it could be killed: make it longer"
    with h5py.File(shard, "r") as handle:
        assert not handle.attrs["complete"] and 0 < len(handle.keys()) < 8000
    finish(cli("embed", ELMO_FIXTURE, corpus, out, "--shard", "0/2"))  # resumed
    finish(cli("embed", ELMO_FIXTURE, corpus, out, "--shard", "1/2"))
    finish(cli("embed-merge", out, shard, shard_path(out, (1, 2))))
    merged, _ = read_all(out)
    assert sorted(merged, key=int) == [str(i) for i in range(16000)]
    single = tmp_path / "single.hdf5"
    embed_file(corpus, single, EmbedSettings(model=str(ELMO_FIXTURE)))
    expected, _ = read_all(single)
    assert all(numpy.array_equal(merged[k], expected[k]) for k in expected)
