import json
import os
import signal
import subprocess
import sys
import time

import numpy
import pytest

from pretrain_support import ELMO_FIXTURE, FIXTURES, SAMPLE_DEV, tiny_config
from spacy_elmo.io.native import load_native
from spacy_elmo.io.arrays import bilm_arrays
from spacy_elmo.io.hdf5 import load_bilm_tf, save_bilm_tf
from spacy_elmo.pretrain import checkpoint as ckpt
from spacy_elmo.pretrain.corpus import CorpusSettings, prepare_corpus
from spacy_elmo.pretrain.perplexity import stream_perplexity
from spacy_elmo.pretrain.train import pretrain
from spacy_elmo.pretrain.vocab import Vocab


def read_metrics(path, kind):
    return [r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if r["type"] == kind]


def test_training_lowers_held_out_perplexity_at_least_4x(trained_tiny):
    evals = read_metrics(trained_tiny.output_dir / "metrics.jsonl", "eval")
    assert [e["step"] for e in evals] == [0, 120]
    before, after = evals[0]["dev_average_ppl"], evals[-1]["dev_average_ppl"]
    assert after * 4 <= before, (before, after)
    train = read_metrics(trained_tiny.output_dir / "metrics.jsonl", "train")
    assert train[-1]["step"] == 120 and train[-1]["tokens"] == 120 * 32 * 20
    assert train[-1]["tokens_per_s"] > 0


def test_output_model_has_softmax_and_vocab_and_evaluates_as_during_training(trained_tiny, corpus_cache):
    model = load_native(trained_tiny.output_dir / "model")
    assert model.softmax is not None and model.vocab[:3] == ["<S>", "</S>", "<UNK>"]
    assert len(model.vocab) == model.softmax.n_vocab == 3000
    dev = prepare_corpus(SAMPLE_DEV, CorpusSettings(max_tokens=5000), corpus_cache)
    result = stream_perplexity(model, dev, max_tokens=5000)
    assert result["average_ppl"] == pytest.approx(trained_tiny.last_eval["average_ppl"], rel=1e-5)


def test_export_to_bilm_tf_and_back_is_bit_exact_with_softmax_and_vocab(trained_tiny, tmp_path):
    model = load_native(trained_tiny.output_dir / "model")
    save_bilm_tf(model, tmp_path / "options.json", tmp_path / "weights.hdf5", tmp_path / "vocab.txt")
    back = load_bilm_tf(tmp_path / "options.json", tmp_path / "weights.hdf5", tmp_path / "vocab.txt")
    original = dict(bilm_arrays(model))
    restored = dict(bilm_arrays(back))
    assert "softmax/W" in restored and "softmax/b" in restored
    assert original.keys() == restored.keys()
    for name, value in original.items():
        assert numpy.array_equal(value, restored[name]), name
    assert back.vocab == model.vocab


def test_sigkill_and_resume_repeats_the_uninterrupted_losses_exactly(tmp_path, corpus_cache):
    overrides = {
        "training.max_steps": 30,
        "training.checkpoint_every": 10,
        "training.log_every": 1,
        "training.eval_every": 0,
        "paths.dev": None,
        "training.dropout": 0.1,
    }
    reference = pretrain(tiny_config(corpus_cache, **overrides), tmp_path / "reference", log=lambda m: None)
    assert len(reference.losses) == 30

    killed = tmp_path / "killed"
    args = [sys.executable, "-m", "spacy_elmo", "pretrain", "pretrain_tiny.cfg", str(killed)]
    for key, value in {
        **overrides,
        "paths.train": tiny_config(corpus_cache)["paths"]["train"],
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
    process.wait()
    assert process.returncode == -signal.SIGKILL

    resumed = pretrain(tiny_config(corpus_cache, **overrides), killed, resume=True, log=lambda m: None)
    assert resumed.state.step == 30
    losses = [r["train_loss"] for r in read_metrics(killed / "metrics.jsonl", "train")]
    assert [r["step"] for r in read_metrics(killed / "metrics.jsonl", "train")] == list(range(1, 31))
    assert losses == reference.losses  # exact, step for step
    a, b = (
        dict(bilm_arrays(reference_model := load_native(tmp_path / "reference" / "model"))),
        dict(bilm_arrays(load_native(killed / "model"))),
    )
    assert all(numpy.array_equal(a[k], b[k]) for k in a) and reference_model.vocab is not None


def test_sigterm_stops_after_the_step_with_a_checkpoint_and_resume_continues_exactly(tmp_path, corpus_cache):
    """The graceful stop: SIGTERM during step 10's logging ends the run after that step, checkpointed and
    with its model saved; the previous handler is back afterwards; resuming repeats the uninterrupted run."""
    overrides = {
        "training.max_steps": 20,
        "training.checkpoint_every": 5,
        "training.log_every": 1,
        "training.eval_every": 0,
        "paths.dev": None,
        "training.dropout": 0.1,
    }
    reference = pretrain(tiny_config(corpus_cache, **overrides), tmp_path / "reference", log=lambda m: None)

    received = []

    def ours(signum, frame):
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        messages = []

        def log(message):
            messages.append(message)
            if message.startswith("step      10 "):
                os.kill(os.getpid(), signal.SIGTERM)

        stopped = pretrain(tiny_config(corpus_cache, **overrides), tmp_path / "stopped", log=log)
        assert received == [] and signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.state.step == 10 and f"stopping at step 10 (signal {int(signal.SIGTERM)})" in messages
    assert ckpt.latest_checkpoint(tmp_path / "stopped" / "checkpoints")[1]["trainer"]["step"] == 10
    assert load_native(tmp_path / "stopped" / "model").vocab is not None

    resumed = pretrain(tiny_config(corpus_cache, **overrides), tmp_path / "stopped", resume=True, log=lambda m: None)
    assert stopped.losses + resumed.losses == reference.losses  # exact, step for step

    def timeless(run):  # the train records, less the wall-clock fields
        records = read_metrics(tmp_path / run / "metrics.jsonl", "train")
        return [{k: v for k, v in r.items() if k not in ("wall_s", "tokens_per_s")} for r in records]

    assert timeless("stopped") == timeless("reference")
    a = dict(bilm_arrays(load_native(tmp_path / "reference" / "model")))
    b = dict(bilm_arrays(load_native(tmp_path / "stopped" / "model")))
    assert a.keys() == b.keys() and all(numpy.array_equal(a[k], b[k]) for k in a)


def test_corrupt_checkpoint_is_refused_and_the_previous_one_used(tmp_path, corpus_cache):
    overrides = {"training.max_steps": 20, "training.checkpoint_every": 10, "training.eval_every": 0, "paths.dev": None}
    out = tmp_path / "run"
    pretrain(tiny_config(corpus_cache, **overrides), out, log=lambda m: None)
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
    result = pretrain(tiny_config(corpus_cache, **overrides), out, resume=True, log=messages.append)
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


def test_fine_tuning_imported_weights_gets_a_new_softmax_and_lowers_perplexity(tmp_path, corpus_cache):
    overrides = {
        "training.max_steps": 40,
        "training.eval_every": 40,
        "training.checkpoint_every": 0,
        "training.optimizer.learn_rate": 0.003,
    }
    messages = []
    result = pretrain(
        tiny_config(corpus_cache, **overrides), tmp_path / "ft", init_from=str(ELMO_FIXTURE), log=messages.append
    )
    assert any("no softmax" in m for m in messages)
    evals = read_metrics(tmp_path / "ft" / "metrics.jsonl", "eval")
    assert evals[-1]["dev_average_ppl"] < evals[0]["dev_average_ppl"] * 0.5
    model = load_native(tmp_path / "ft" / "model")
    fixture = load_bilm_tf(ELMO_FIXTURE / "options.json", ELMO_FIXTURE / "lm_weights.hdf5")
    assert model.options.lstm_dim == fixture.options.lstm_dim and model.softmax.n_vocab == len(model.vocab) == 3000
    assert result.state.step == 40


def test_continuing_a_native_model_keeps_its_softmax_and_vocabulary(trained_tiny, tmp_path, corpus_cache):
    overrides = {
        "training.max_steps": 5,
        "training.eval_every": 0,
        "training.checkpoint_every": 0,
        "paths.dev": None,
        "vocab.max_size": 100,
    }
    messages = []
    pretrain(
        tiny_config(corpus_cache, **overrides),
        tmp_path / "more",
        init_from=str(trained_tiny.output_dir / "model"),
        log=messages.append,
    )
    assert any("with its own softmax" in m for m in messages)
    assert load_native(tmp_path / "more" / "model").vocab == load_native(trained_tiny.output_dir / "model").vocab


def test_bilm_tf_training_format_with_its_vocabulary_file(tmp_path):
    data = FIXTURES / "bilm-tf-train"
    overrides = {
        "paths.train": str(data / "data.txt"),
        "paths.dev": str(data / "data.txt"),
        "corpus.format": "bilm-tf",
        "vocab.file": str(data / "vocab.txt"),
        "training.window": 5,
        "training.batch_size": 2,
        "training.max_steps": 4,
        "training.eval_every": 4,
        "training.checkpoint_every": 0,
        "training.n_negatives": 0,
    }
    result = pretrain(tiny_config(tmp_path / "cache", **overrides), tmp_path / "run", log=lambda m: None)
    model = load_native(tmp_path / "run" / "model")
    assert model.vocab == Vocab.from_file(data / "vocab.txt").words
    assert result.state.tokens == 4 * 2 * 5 and result.last_eval["n_tokens"] > 0
