"""The biLM layer runs through the one runner: its out-of-memory split serves the pipe too."""

from pathlib import Path

import numpy
import pytest
import spacy

from spacy_elmo.layers import bilm_model

ELMO_FIXTURE = Path(__file__).parent.parent / "fixtures" / "elmo-fixture"
TEXTS = [f"Sentence {i} talks about the bank of the river. And money {i}." for i in range(12)]


def fixture_nlp() -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"model": {"path": str(ELMO_FIXTURE)}})
    return nlp


def test_out_of_memory_in_the_pipe_is_split_and_gives_the_same_layers():
    expected = [doc._.elmo_layers for doc in fixture_nlp().pipe(TEXTS)]
    nlp = fixture_nlp()
    runner = bilm_model.get_runner(nlp.get_pipe("elmo").model)
    real_forward = runner._forward

    def forward_that_fits_3(char_ids):
        if char_ids.shape[0] > 3:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return real_forward(char_ids)

    runner._forward = forward_that_fits_3
    got = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]
    assert runner.n_splits > 0 and runner.token_budget < 4096
    for a, b in zip(expected, got):
        assert numpy.array_equal(a, b)
    again = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]  # later batches keep to the lowered budget
    for a, b in zip(expected, again):
        assert numpy.array_equal(a, b)


def test_the_layer_knows_its_dims_before_loading_weights():
    nlp = fixture_nlp()
    model = nlp.get_pipe("elmo").model
    assert not bilm_model.get_runner(model).loaded
    options = bilm_model.known_options(model)
    assert options is not None and (options.output_dim, options.n_output_layers) == (32, 3)
    assert not bilm_model.get_runner(model).loaded


def test_a_missing_path_names_the_config_option(tmp_path):
    nlp = spacy.blank("en")
    with pytest.raises(FileNotFoundError, match=r"nowhere' does not exist \(spacy-elmo.BiLM.v1 model.path\)"):
        nlp.add_pipe("elmo", config={"model": {"path": str(tmp_path / "nowhere")}})
