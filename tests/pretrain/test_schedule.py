"""The learning-rate schedule: warm-up, then constant, linear or cosine decay to a floor."""

import json
import math

import pytest

from spacy_elmo.pretrain.build import pretrain
from spacy_elmo.pretrain.config import PretrainConfigError, PretrainSettings, load_config
from spacy_elmo.pretrain.schedule import warmup_decay


def test_warmup_ramps_linearly_to_the_peak_then_holds_without_decay():
    rate = warmup_decay(warmup_steps=4)
    assert [rate(s, 0.01, None) for s in range(6)] == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])
    assert rate(10**6, 0.01, None) == 0.01


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_decay_falls_monotonically_from_the_peak_to_the_floor_at_the_horizon(decay):
    rate = warmup_decay(warmup_steps=10, decay=decay, final_learn_rate_ratio=0.1)

    def schedule(step: int) -> float:
        return rate(step, 0.002, 110)

    rates = [schedule(s) for s in range(10, 130)]
    assert rates[0] == pytest.approx(0.002)
    assert all(a >= b for a, b in zip(rates, rates[1:])) and rates[0] > rates[50] > rates[100]
    assert schedule(110) == pytest.approx(0.0002) and schedule(10**6) == pytest.approx(0.0002)
    # halfway: the mean of peak and floor for both shapes (cosine is symmetric about its midpoint)
    assert schedule(60) == pytest.approx(0.0011)
    if decay == "cosine":
        assert schedule(35) == pytest.approx(0.0002 + 0.0018 * 0.5 * (1 + math.cos(math.pi / 4)))
    else:
        assert schedule(35) == pytest.approx(0.002 - 0.0018 / 4)


def test_horizon_is_max_steps_or_else_max_epochs_of_steps():
    def last_step(**overrides):
        config = load_config(text="", overrides={"paths.train": "corpus.txt", **overrides})
        return PretrainSettings.from_config(config).training.last_step(steps_per_epoch=70)

    assert last_step(**{"training.max_steps": 500, "training.schedule.decay": "linear"}) == 500
    by_epochs = {"training.max_steps": 0, "training.max_epochs": 3, "training.schedule.decay": "linear"}
    assert last_step(**by_epochs) == 210


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"training.schedule.decay": "exponential"},
            "training.schedule.decay: 'exponential' is not .*'none', 'linear', 'cosine'",
        ),
        ({"training.schedule.final_learn_rate_ratio": 1.5}, "final_learn_rate_ratio is 1.5"),
        (
            {"training.schedule.decay": "cosine", "training.max_steps": 0, "training.max_minutes": 30},
            "neither training.max_steps nor training.max_epochs",
        ),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_setting(overrides, message, tmp_path, tiny_config):
    config = tiny_config(**overrides)
    with pytest.raises(PretrainConfigError, match=message):
        pretrain(config, tmp_path / "out", log=lambda m: None)
    assert not (tmp_path / "out" / "checkpoints").exists()  # refused before any work


def test_training_follows_the_schedule_step_for_step(tmp_path, tiny_config):
    overrides = {
        "training.max_steps": 12,
        "training.log_every": 1,
        "training.eval_every": 0,
        "paths.dev": None,
        "training.checkpoint_every": 0,
        "training.schedule.warmup_steps": 2,
        "training.schedule.decay": "linear",
        "training.schedule.final_learn_rate_ratio": 0.25,
    }
    config = tiny_config(**overrides)
    pretrain(config, tmp_path / "out", log=lambda m: None)
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    logged = [r["lr"] for r in records if r["type"] == "train"]
    peak = config["training"]["optimizer"]["learn_rate"]
    rate = warmup_decay(2, "linear", 0.25)
    assert logged == pytest.approx([rate(step, peak, 12) for step in range(12)])
    assert logged[1] == pytest.approx(peak) and logged[-1] == pytest.approx(peak * (0.25 + 0.75 / 10))
