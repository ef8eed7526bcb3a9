"""Building a run from its config: starting from imported or native weights, a bilm-tf corpus with its
vocabulary file."""

from fixture_paths import ELMO_FIXTURE, FIXTURES
from spacy_elmo.io.hdf5 import load_bilm_tf
from spacy_elmo.io.resolve import load_model
from spacy_elmo.pretrain.build import pretrain
from spacy_elmo.pretrain.vocab import Vocab


def test_fine_tuning_imported_weights_gets_a_new_softmax_and_lowers_perplexity(tmp_path, tiny_config, read_metrics):
    overrides = {
        "training.max_steps": 40,
        "training.eval_every": 40,
        "training.checkpoint_every": 0,
        "training.optimizer.learn_rate": 0.003,
    }
    messages = []
    result = pretrain(tiny_config(**overrides), tmp_path / "ft", init_from=str(ELMO_FIXTURE), log=messages.append)
    assert any("no softmax" in m for m in messages)
    evals = read_metrics(tmp_path / "ft" / "metrics.jsonl", "eval")
    assert evals[-1]["dev_average_ppl"] < evals[0]["dev_average_ppl"] * 0.5
    model = load_model(tmp_path / "ft" / "model").bilm
    fixture = load_bilm_tf(ELMO_FIXTURE / "options.json", ELMO_FIXTURE / "lm_weights.hdf5")
    assert model.options.lstm_dim == fixture.options.lstm_dim and model.softmax.n_vocab == len(model.vocab) == 3000
    assert result.state.step == 40


def test_continuing_a_native_model_keeps_its_softmax_and_vocabulary(trained_tiny, tmp_path, tiny_config):
    overrides = {
        "training.max_steps": 5,
        "training.eval_every": 0,
        "training.checkpoint_every": 0,
        "paths.dev": None,
        "vocab.max_size": 100,
    }
    messages = []
    pretrain(
        tiny_config(**overrides),
        tmp_path / "more",
        init_from=str(trained_tiny.output_dir / "model"),
        log=messages.append,
    )
    assert any("with its own softmax" in m for m in messages)
    assert (
        load_model(tmp_path / "more" / "model").bilm.vocab == load_model(trained_tiny.output_dir / "model").bilm.vocab
    )


def test_bilm_tf_training_format_with_its_vocabulary_file(tmp_path, tiny_config):
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
    model = load_model(tmp_path / "run" / "model").bilm
    assert model.vocab == Vocab.from_file(data / "vocab.txt").words
    assert result.state.tokens == 4 * 2 * 5 and result.last_eval["n_tokens"] > 0
