"""A threads setting for the biLM that never leaks into the caller's torch state."""

import spacy
import torch

from spacy_elmo.bilm.bilm import BiLM
from spacy_elmo.bilm.runner import BiLMRunner, torch_threads


def test_torch_threads_restores_the_callers_setting():
    before = torch.get_num_threads()
    with torch_threads(3):
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == before
    with torch_threads(0):  # 0 leaves torch alone
        assert torch.get_num_threads() == before


def test_runner_and_pipe_run_with_their_threads_and_restore(reference_bilm, fixture_dir, monkeypatch):
    seen = []
    forward = reference_bilm.forward

    def spying(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return forward(*args, **kwargs)

    before = torch.get_num_threads()
    monkeypatch.setattr(reference_bilm, "forward", spying)
    expected = BiLMRunner(reference_bilm).embed_sentences([["a", "b"]])[0]
    got = BiLMRunner(reference_bilm, n_threads=before + 1).embed_sentences([["a", "b"]])[0]
    assert seen == [before, before + 1] and torch.get_num_threads() == before
    assert (expected == got).all()

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(fixture_dir), "n_threads": before + 2}})
    seen.clear()
    class_forward = BiLM.forward

    def spying_class(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return class_forward(self, *args, **kwargs)

    monkeypatch.setattr(BiLM, "forward", spying_class)
    nlp("a b c")
    assert seen == [before + 2] and torch.get_num_threads() == before
