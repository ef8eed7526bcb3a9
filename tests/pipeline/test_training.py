"""`spacy train` of `ner` + `textcat` listening to one `elmo` pipe (WNUT-17 and MR samples, the fixture
biLM), and the partial base configs with `spacy init fill-config` + `spacy debug config`."""

import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.cli.init_config import fill_config
from spacy.cli.train import train
from spacy.tokens import DocBin
from spacy.training import Example

import spacy_elmo.bilm.bilm
from fixture_paths import ELMO_FIXTURE, FIXTURES
from spacy_elmo.io.hdf5 import load_bilm_tf
from spacy_elmo.layers import bilm_parameters

SAMPLES = FIXTURES / "spacy"
CONFIGS = Path(spacy_elmo.__file__).parent / "configs"
CALLS = {"n": 0, "by_step": []}


@spacy.registry.callbacks("spacy-elmo-test.record_bilm_calls.v1")
def record_bilm_calls():
    def before_update(nlp, info):
        CALLS["by_step"].append((info["epoch"], info["step"], CALLS["n"]))

    return before_update


@pytest.fixture
def count_bilm_calls(monkeypatch):
    CALLS["n"], CALLS["by_step"] = 0, []
    forward = spacy_elmo.bilm.bilm.BiLM.forward

    def counting(self, *args, **kwargs):
        CALLS["n"] += 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(spacy_elmo.bilm.bilm.BiLM, "forward", counting)
    return CALLS


def spacy_train(tmp_path: Path, use_gpu: int = -1, **overrides) -> spacy.Language:
    config = tmp_path / "config.cfg"
    fill_config(config, SAMPLES / "ner_textcat.cfg")
    settings = {
        "paths.train": str(SAMPLES / "train"),
        "paths.dev": str(SAMPLES / "dev"),
        "paths.elmo": str(ELMO_FIXTURE),
        "training.eval_frequency": 10,
        "training.patience": 0,
        "training.max_steps": 0,
        "training.before_update": {"@callbacks": "spacy-elmo-test.record_bilm_calls.v1"},
    }
    settings.update(overrides)
    train(config, tmp_path / "out", overrides=settings, use_gpu=use_gpu)
    return spacy.load(tmp_path / "out" / "model-last")


def dev_scores(nlp: spacy.Language, name: str) -> dict:
    docs = DocBin().from_disk(SAMPLES / "dev" / f"{name}.spacy").get_docs(nlp.vocab)
    return nlp.evaluate([Example(nlp.make_doc(doc.text), doc) for doc in docs])


def mix_of(nlp: spacy.Language, component: str):
    mix = [n for n in nlp.get_pipe(component).model.walk() if n.name == "elmo-scalar-mix"][0]
    return mix.get_param("weights"), float(mix.get_param("gamma")[0])


def fixture_weights():
    return {
        name: p.detach().numpy()
        for name, p in load_bilm_tf(ELMO_FIXTURE / "options.json", ELMO_FIXTURE / "lm_weights.hdf5").named_parameters()
    }


def test_spacy_train_ner_and_textcat_with_a_frozen_bilm(tmp_path, count_bilm_calls):
    nlp = spacy_train(tmp_path, **{"training.max_epochs": 6})
    # the biLM ran in the first epoch only (train docs, and dev docs for the evaluation at step 0)
    by_step = count_bilm_calls["by_step"]
    first_of_epoch_2 = next(n for epoch, _, n in by_step if epoch == 1)
    assert by_step[0][2] > 0 and first_of_epoch_2 > by_step[0][2]
    assert count_bilm_calls["n"] == first_of_epoch_2, "later epochs ran the biLM"
    # each task learned its own mix; the biLM did not move
    for component in ("ner", "textcat"):
        weights, gamma = mix_of(nlp, component)
        assert numpy.abs(weights).max() > 1e-3 and abs(gamma - 1.0) > 1e-3, component
    assert not numpy.allclose(mix_of(nlp, "ner")[0], mix_of(nlp, "textcat")[0])
    trained = bilm_parameters(nlp.get_pipe("elmo").model)
    reference = fixture_weights()
    assert trained.keys() == reference.keys()
    assert all(numpy.array_equal(trained[k], reference[k]) for k in reference)
    # both tasks well above chance on their held-out samples
    assert dev_scores(nlp, "wnut17")["ents_f"] > 0.6
    assert dev_scores(nlp, "mr")["cats_macro_f"] > 0.65


def test_spacy_train_ner_and_textcat_with_the_onnx_runtime(tmp_path, fixture_graph_file):
    """The listeners learn their mixes from the exported graph as from the torch biLM (the reference model's
    graph, exported once for the run: tests/layers/test_onnx_bilm.py has a model exported at initialize)."""
    settings = {"paths.elmo": str(fixture_graph_file.path), "components.elmo.model.runtime": "onnxruntime"}
    nlp = spacy_train(tmp_path, **{"training.max_epochs": 6, **settings})
    assert nlp.get_pipe("elmo").runtime == "onnxruntime"
    for component in ("ner", "textcat"):
        weights, gamma = mix_of(nlp, component)
        assert numpy.abs(weights).max() > 1e-3 and abs(gamma - 1.0) > 1e-3, component
    assert dev_scores(nlp, "wnut17")["ents_f"] > 0.6
    assert dev_scores(nlp, "mr")["cats_macro_f"] > 0.65


def test_spacy_train_fine_tunes_the_bilm(tmp_path, count_bilm_calls):
    nlp = spacy_train(
        tmp_path, **{"components.elmo.model.fine_tune": True, "training.max_steps": 4, "training.eval_frequency": 100}
    )
    trained = bilm_parameters(nlp.get_pipe("elmo").model)
    reference = fixture_weights()
    changed = [k for k in reference if not numpy.array_equal(trained[k], reference[k])]
    assert len(changed) == len(reference)
    weights, gamma = mix_of(nlp, "ner")
    assert numpy.abs(weights).max() > 0 and gamma != 1.0


@pytest.mark.slow
@pytest.mark.parametrize("name,elmo", [("ner.cfg", str(ELMO_FIXTURE)), ("textcat.cfg", "")])
def test_base_configs_fill_and_debug(tmp_path, capsys, name, elmo):
    """`spacy init fill-config` (the CLI, through the entry points) and `spacy debug config`; the
    weights are not read for either (textcat: the default model, which need not be installed)."""
    from spacy.cli.debug_config import debug_config

    filled = tmp_path / "config.cfg"
    command = [sys.executable, "-m", "spacy", "init", "fill-config", str(CONFIGS / name), str(filled)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    overrides = {"paths.train": str(SAMPLES / "train"), "paths.dev": str(SAMPLES / "dev"), "paths.elmo": elmo}
    debug_config(filled, overrides=overrides)
    assert "Config is valid" in capsys.readouterr().out
