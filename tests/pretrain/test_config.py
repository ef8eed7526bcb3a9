"""The pretraining config: read by one schema (every problem with its key and the file; the optimizer chosen by
its registered name); resuming with another config refused for the model and the data, allowed (and said) for
when to stop."""

import pytest
import torch

from spacy_elmo.pretrain.build import pretrain
from spacy_elmo.pretrain.config import PretrainConfigError, PretrainSettings, load_config

FIRST = {"training.max_steps": 4, "training.checkpoint_every": 2, "training.eval_every": 0, "paths.dev": None}


@pytest.fixture
def interrupted_run(tmp_path, tiny_config):
    out = tmp_path / "run"
    pretrain(tiny_config(**FIRST), out, log=lambda m: None)
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
def test_a_changed_model_or_data_setting_is_refused_naming_it(interrupted_run, tiny_config, key, value):
    saved = (interrupted_run / "config.cfg").read_text()
    changed = tiny_config(**{**FIRST, key: value, "training.max_steps": 6})
    with pytest.raises(PretrainConfigError) as error:
        pretrain(changed, interrupted_run, resume=True, log=lambda m: None)
    message = str(error.value)
    assert "cannot resume from" in message and "step_00000004.ckpt" in message
    assert f"{key}: " in message and repr(value) in message
    assert "training.max_steps" not in message.split("Safe to change")[0]  # an allowed change is not listed
    assert (interrupted_run / "config.cfg").read_text() == saved  # never rewritten


def test_safe_changes_are_allowed_logged_and_written(interrupted_run, tiny_config):
    said = []
    more = tiny_config(**{**FIRST, "training.max_steps": 6, "training.log_every": 3})
    result = pretrain(more, interrupted_run, resume=True, log=said.append)
    assert result.state.step == 6
    assert any("resuming with training.max_steps changed: 4 -> 6" in line for line in said)
    assert any("config.cfg updated" in line for line in said)
    assert "max_steps = 6" in (interrupted_run / "config.cfg").read_text()


def test_every_problem_is_reported_at_once_with_its_key_and_the_config_file(tmp_path):
    path = tmp_path / "my.cfg"
    path.write_text(
        '[model]\nlstm_dims = 64\n\n[training]\ndropout = 1.5\nmixed_precision = "yes"\nlearn_rate = 0.1\n\n'
        '[training.optimizer]\nname = "adam"\n',
        encoding="utf-8",
    )
    with pytest.raises(PretrainConfigError) as error:
        PretrainSettings.from_config(load_config(path), source=str(path))
    message = str(error.value)
    assert message.startswith(f"{path}: 6 problems")
    for expected in (
        "corpus.train is not set",
        "model: unknown settings ['lstm_dims']",
        "training.dropout is 1.5",
        "training.mixed_precision: unknown setting",
        "training.learn_rate: unknown setting",
        "training.optimizer.name: unexpected argument: 'name'",
    ):
        assert expected in message, expected


@pytest.mark.parametrize(
    "name,kind,extra",
    [
        ("spacy-elmo.Adam.v1", torch.optim.Adam, {"eps": 1e-6}),
        ("spacy-elmo.Adagrad.v1", torch.optim.Adagrad, {"initial_accumulator_value": 0.5}),
        ("spacy-elmo.SGD.v1", torch.optim.SGD, {}),
    ],
)
def test_the_optimizer_is_chosen_by_its_registered_name(name, kind, extra):
    block = "".join(f"{key} = {value}\n" for key, value in extra.items())
    text = f'[training]\n\n[training.optimizer]\n@optimizers = "{name}"\nlearn_rate = 0.5\n{block}'
    settings = PretrainSettings.from_config(load_config(text=text, overrides={"paths.train": "corpus.txt"}))
    optimizer = settings.training.optimizer([torch.nn.Parameter(torch.zeros(2))])
    assert type(optimizer) is kind and optimizer.defaults["lr"] == 0.5
    assert all(optimizer.defaults[key] == value for key, value in extra.items())


def test_an_unknown_or_misused_optimizer_is_refused_naming_the_key():
    def problem(**overrides):
        config = load_config(text="", overrides={"paths.train": "corpus.txt", **overrides})
        with pytest.raises(PretrainConfigError) as error:
            PretrainSettings.from_config(config)
        return str(error.value)

    unknown = problem(**{"training.optimizer.@optimizers": "spacy-elmo.Lion.v1"})
    assert "training.optimizer.@optimizers is 'spacy-elmo.Lion.v1'" in unknown and "spacy-elmo.Adagrad.v1" in unknown
    assert "training.optimizer.learn_rate is -1" in problem(**{"training.optimizer.learn_rate": -1})
    # thinc's Adam.v1 makes a thinc optimizer, for `spacy train`: not one pretraining can use
    assert "training.optimizer is" in problem(**{"training.optimizer.@optimizers": "Adam.v1"})


@pytest.mark.parametrize(
    "value,said",
    [(-1, "greater than or equal to 0"), (1.5, "valid integer"), ("2", "valid integer")],
)
def test_training_threads_must_be_a_whole_count(value, said):
    config = load_config(text='[paths]\ntrain = "x"', overrides={"training.n_threads": value})
    with pytest.raises(
        PretrainConfigError, match=rf"my.cfg: training.n_threads is {value!r}; input should be .*{said}"
    ):
        PretrainSettings.from_config(config, "my.cfg")


def test_precision_fp16_needs_a_gpu_and_an_unknown_override_is_refused(tmp_path, tiny_config):
    with pytest.raises(PretrainConfigError, match="training.precision is 'fp16', which needs a GPU .* use 'bf16'"):
        pretrain(tiny_config(**{"training.precision": "fp16"}), tmp_path / "out", log=lambda m: None)
    assert not (tmp_path / "out").exists()  # refused before any work
    with pytest.raises(PretrainConfigError, match="--training.mixed_precision: unknown setting"):
        tiny_config(**{"training.mixed_precision": True})
