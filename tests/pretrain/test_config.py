"""Resuming with another config: refused for the model and the data, allowed (and said) for when to stop."""

import pytest

from pretrain_support import tiny_config
from spacy_elmo.pretrain.config import PretrainConfigError
from spacy_elmo.pretrain.train import pretrain

FIRST = {"training.max_steps": 4, "training.checkpoint_every": 2, "training.eval_every": 0, "paths.dev": None}


@pytest.fixture
def interrupted_run(tmp_path, corpus_cache):
    out = tmp_path / "run"
    pretrain(tiny_config(corpus_cache, **FIRST), out, log=lambda m: None)
    return out


@pytest.mark.parametrize(
    "key,value",
    [
        ("model.lstm_dim", 32),
        ("training.batch_size", 16),
        ("training.optimizer.learn_rate", 0.5),
        ("vocab.max_size", 1000),
    ],
)
def test_a_changed_model_or_data_setting_is_refused_naming_it(interrupted_run, corpus_cache, key, value):
    saved = (interrupted_run / "config.cfg").read_text()
    changed = tiny_config(corpus_cache, **{**FIRST, key: value, "training.max_steps": 6})
    with pytest.raises(PretrainConfigError) as error:
        pretrain(changed, interrupted_run, resume=True, log=lambda m: None)
    message = str(error.value)
    assert "cannot resume from" in message and "step_00000004.ckpt" in message
    assert f"{key}: " in message and repr(value) in message
    assert "training.max_steps" not in message.split("Safe to change")[0]  # an allowed change is not listed
    assert (interrupted_run / "config.cfg").read_text() == saved  # never rewritten


def test_safe_changes_are_allowed_logged_and_written(interrupted_run, corpus_cache):
    said = []
    more = tiny_config(corpus_cache, **{**FIRST, "training.max_steps": 6, "training.log_every": 3})
    result = pretrain(more, interrupted_run, resume=True, log=said.append)
    assert result.state.step == 6
    assert any("resuming with training.max_steps changed: 4 -> 6" in line for line in said)
    assert any("config.cfg updated" in line for line in said)
    assert "max_steps = 6" in (interrupted_run / "config.cfg").read_text()
