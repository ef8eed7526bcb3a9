"""The training loop: it lowers perplexity, evaluates and saves the model, stops at a signal after the step,
and bf16 mixed precision follows the fp32 loss curve."""

import os
import signal
import statistics

import numpy
import pytest

from spacy_elmo.io.arrays import bilm_arrays
from spacy_elmo.io.hdf5 import load_bilm_tf, save_bilm_tf
from spacy_elmo.io.resolve import load_model
from spacy_elmo.pretrain import checkpoint as ckpt
from spacy_elmo.pretrain.build import pretrain
from spacy_elmo.pretrain.corpus import CorpusSettings, prepare_corpus
from spacy_elmo.pretrain.perplexity import stream_perplexity


def test_training_lowers_held_out_perplexity_at_least_4x(trained_tiny, read_metrics):
    evals = read_metrics(trained_tiny.output_dir / "metrics.jsonl", "eval")
    assert [e["step"] for e in evals] == [0, 120]
    before, after = evals[0]["dev_average_ppl"], evals[-1]["dev_average_ppl"]
    assert after * 4 <= before, (before, after)
    train = read_metrics(trained_tiny.output_dir / "metrics.jsonl", "train")
    assert train[-1]["step"] == 120 and train[-1]["tokens"] == 120 * 32 * 20
    assert train[-1]["tokens_per_s"] > 0


def test_output_model_has_softmax_and_vocab_and_evaluates_as_during_training(trained_tiny, corpus_cache, sample_dev):
    model = load_model(trained_tiny.output_dir / "model").bilm
    assert model.softmax is not None and model.vocab[:3] == ["<S>", "</S>", "<UNK>"]
    assert len(model.vocab) == model.softmax.n_vocab == 3000
    dev = prepare_corpus(sample_dev, CorpusSettings(max_tokens=5000), corpus_cache)
    result = stream_perplexity(model, dev, max_tokens=5000)
    assert result["average_ppl"] == pytest.approx(trained_tiny.last_eval["average_ppl"], rel=1e-5)


def test_export_to_bilm_tf_and_back_is_bit_exact_with_softmax_and_vocab(trained_tiny, tmp_path):
    model = load_model(trained_tiny.output_dir / "model").bilm
    save_bilm_tf(model, tmp_path / "options.json", tmp_path / "weights.hdf5", tmp_path / "vocab.txt")
    back = load_bilm_tf(tmp_path / "options.json", tmp_path / "weights.hdf5", tmp_path / "vocab.txt")
    original = dict(bilm_arrays(model))
    restored = dict(bilm_arrays(back))
    assert "softmax/W" in restored and "softmax/b" in restored
    assert original.keys() == restored.keys()
    for name, value in original.items():
        assert numpy.array_equal(value, restored[name]), name
    assert back.vocab == model.vocab


def test_sigterm_stops_after_the_step_with_a_checkpoint_and_resume_continues_exactly(
    tmp_path, tiny_config, read_metrics
):
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
    reference = pretrain(tiny_config(**overrides), tmp_path / "reference", log=lambda m: None)

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

        stopped = pretrain(tiny_config(**overrides), tmp_path / "stopped", log=log)
        assert received == [] and signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.state.step == 10 and f"stopping at step 10 (signal {int(signal.SIGTERM)})" in messages
    assert ckpt.latest_checkpoint(tmp_path / "stopped" / "checkpoints")[1]["trainer"]["step"] == 10
    assert load_model(tmp_path / "stopped" / "model").bilm.vocab is not None

    resumed = pretrain(tiny_config(**overrides), tmp_path / "stopped", resume=True, log=lambda m: None)
    assert stopped.losses + resumed.losses == reference.losses  # exact, step for step

    def timeless(run):  # the train records, less the wall-clock fields
        records = read_metrics(tmp_path / run / "metrics.jsonl", "train")
        return [{k: v for k, v in r.items() if k not in ("wall_s", "tokens_per_s")} for r in records]

    assert timeless("stopped") == timeless("reference")
    a = dict(bilm_arrays(load_model(tmp_path / "reference" / "model").bilm))
    b = dict(bilm_arrays(load_model(tmp_path / "stopped" / "model").bilm))
    assert a.keys() == b.keys() and all(numpy.array_equal(a[k], b[k]) for k in a)


@pytest.mark.slow  # 120 bf16 training steps: about 30 s on a CPU without bf16 instructions
def test_bf16_follows_the_fp32_loss_curve(trained_tiny, tiny_config, tmp_path):
    config = tiny_config(
        **{"training.max_steps": 120, "training.eval_every": 120, "training.precision": "bf16"},
    )
    bf16 = pretrain(config, tmp_path / "bf16", log=lambda message: None)
    fp32 = trained_tiny
    assert len(bf16.losses) == len(fp32.losses) == 120
    assert bf16.losses != fp32.losses, "mixed precision changed nothing: autocast did not run"
    # the curves agree window by window (20 steps each), within 3% of the fp32 loss
    for start in range(0, 120, 20):
        ours = statistics.mean(bf16.losses[start : start + 20])
        theirs = statistics.mean(fp32.losses[start : start + 20])
        assert abs(ours - theirs) <= 0.03 * theirs, (start, ours, theirs)
    assert bf16.last_eval is not None and fp32.last_eval is not None
    ppl_bf16, ppl_fp32 = bf16.last_eval["average_ppl"], fp32.last_eval["average_ppl"]
    assert abs(ppl_bf16 - ppl_fp32) <= 0.05 * ppl_fp32, (ppl_bf16, ppl_fp32)


def test_a_run_that_the_clock_ends_before_its_steps_says_so_and_one_that_reaches_them_does_not(tmp_path, tiny_config):
    """`max_minutes` beside `max_steps` is a guard: where it ends the run first, the model depends on the
    machine's speed, which the log says as a warning naming the step reached; a run that reaches its steps
    first says nothing of it."""
    overrides = {"training.eval_every": 0, "paths.dev": None, "training.checkpoint_every": 0}
    messages: list[str] = []
    cut = pretrain(
        tiny_config(**overrides, **{"training.max_steps": 500, "training.max_minutes": 1e-9}),
        tmp_path / "cut",
        log=messages.append,
    )
    warnings = [m for m in messages if m.startswith("warning: training.max_minutes")]
    assert cut.state.step < 500 and len(warnings) == 1, messages
    assert f"at step {cut.state.step} of 500" in warnings[0] and "max_steps alone" in warnings[0]
    messages.clear()
    full = pretrain(
        tiny_config(**overrides, **{"training.max_steps": 2, "training.max_minutes": 60}),
        tmp_path / "full",
        log=messages.append,
    )
    assert full.state.step == 2 and not any("max_minutes" in m for m in messages), messages
