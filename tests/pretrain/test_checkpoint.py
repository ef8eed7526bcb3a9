"""Checkpoints: a killed or stopped run resumes exactly; a corrupt checkpoint is refused for the one before
it; half-written temporaries of killed writers do not pile up."""

import os
import signal
import subprocess
import sys
import time

import numpy
import pytest

from spacy_elmo.io.arrays import bilm_arrays
from spacy_elmo.io.resolve import load_model
from spacy_elmo.pretrain import checkpoint as ckpt
from spacy_elmo.pretrain.build import pretrain


def dead_pid() -> int:
    command = [sys.executable, "-c", "import os; print(os.getpid())"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return int(done.stdout)


@pytest.mark.slow
def test_temporaries_of_killed_writers_are_removed_on_the_next_start(tmp_path):
    stale = tmp_path / f"step_00000040.ckpt.tmp{dead_pid()}"
    live = tmp_path / f"step_00000040.ckpt.tmp{os.getppid()}"  # a writer that is still running
    for path in (stale, live):
        path.write_bytes(b"half a checkpoint")
    ckpt.write_checkpoint(tmp_path, 20, {"step": 20})
    warnings = []
    found = ckpt.latest_checkpoint(tmp_path, warn=warnings.append)
    assert found is not None and found[1] == {"step": 20}
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "step_00000020.ckpt"])


@pytest.mark.slow
def test_latest_checkpoint_says_what_it_removed(tmp_path):
    stale = tmp_path / f"step_00000010.ckpt.tmp{dead_pid()}"
    stale.write_bytes(b"x")
    warnings = []
    assert ckpt.latest_checkpoint(tmp_path, warn=warnings.append) is None
    assert not stale.exists() and any(stale.name in w for w in warnings)


@pytest.mark.slow
def test_sigkill_and_resume_repeats_the_uninterrupted_losses_exactly(tmp_path, corpus_cache, tiny_config, read_metrics):
    overrides = {
        "training.max_steps": 30,
        "training.checkpoint_every": 10,
        "training.log_every": 1,
        "training.eval_every": 0,
        "paths.dev": None,
        "training.dropout": 0.1,
    }
    reference = pretrain(tiny_config(**overrides), tmp_path / "reference", log=lambda m: None)
    assert len(reference.losses) == 30

    killed = tmp_path / "killed"
    args = [sys.executable, "-m", "spacy_elmo", "pretrain", "pretrain_tiny.cfg", str(killed)]
    for key, value in {
        **overrides,
        "paths.train": tiny_config()["paths"]["train"],
        "corpus.cache_dir": str(corpus_cache),
        "training.n_threads": 1,
        "training.max_steps": 1000,
    }.items():
        args += [f"--{key}", "null" if value is None else str(value)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    target = ckpt.checkpoint_path(killed / "checkpoints", 20)
    while not target.exists():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.time() < deadline, "the run never reached its step-20 checkpoint"
        time.sleep(0.05)
    time.sleep(0.3)  # let it get some steps past the checkpoint
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL

    resumed = pretrain(tiny_config(**overrides), killed, resume=True, log=lambda m: None)
    assert resumed.state.step == 30
    losses = [r["train_loss"] for r in read_metrics(killed / "metrics.jsonl", "train")]
    assert [r["step"] for r in read_metrics(killed / "metrics.jsonl", "train")] == list(range(1, 31))
    assert losses == reference.losses  # exact, step for step
    a, b = (
        dict(bilm_arrays(reference_model := load_model(tmp_path / "reference" / "model").bilm)),
        dict(bilm_arrays(load_model(killed / "model").bilm)),
    )
    assert all(numpy.array_equal(a[k], b[k]) for k in a) and reference_model.vocab is not None


def test_corrupt_checkpoint_is_refused_and_the_previous_one_used(tmp_path, tiny_config):
    overrides = {"training.max_steps": 20, "training.checkpoint_every": 10, "training.eval_every": 0, "paths.dev": None}
    out = tmp_path / "run"
    pretrain(tiny_config(**overrides), out, log=lambda m: None)
    newest = ckpt.checkpoint_path(out / "checkpoints", 20)
    previous = ckpt.checkpoint_path(out / "checkpoints", 10)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="corrupt"):
        ckpt.read_checkpoint(newest)
    newest_truncated = ckpt.checkpoint_path(out / "checkpoints", 30)
    newest_truncated.write_bytes(previous.read_bytes()[:1000])
    messages = []
    result = pretrain(tiny_config(**overrides), out, resume=True, log=messages.append)
    refused = [m for m in messages if "refusing" in m]
    assert len(refused) == 2 and str(newest_truncated) in refused[0] and str(newest) in refused[1]
    assert any("resumed from" in m and str(previous) in m for m in messages)
    assert previous.exists() and result.state.step == 20
    assert ckpt.read_checkpoint(newest)["trainer"]["step"] == 20  # written again, readable
    assert not [p for p in (out / "checkpoints").iterdir() if ".tmp" in p.name]
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.endswith(".corrupt")) == [
        newest.name + ".corrupt",
        newest_truncated.name + ".corrupt",
    ]


def test_a_resumed_run_with_no_step_left_writes_no_checkpoint_again(tmp_path, tiny_config):
    overrides = {"training.max_steps": 6, "training.checkpoint_every": 4, "training.eval_every": 0, "paths.dev": None}
    out = tmp_path / "run"
    pretrain(tiny_config(**overrides), out, log=lambda m: None)
    written = {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()}
    assert sorted(written) == ["step_00000004.ckpt", "step_00000006.ckpt"]  # the end of the run is checkpointed
    messages = []
    result = pretrain(tiny_config(**overrides), out, resume=True, log=messages.append)
    assert result.state.step == 6 and result.losses == []
    assert not [m for m in messages if m.startswith("checkpoint ")]
    assert {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()} == written
