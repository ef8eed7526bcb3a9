"""A threads setting for the biLM that never leaks into the caller's torch state, and by default never more
threads than the CPUs the process may use (a faked cgroup quota)."""

import os

import pytest
import spacy
import torch

from spacy_elmo import cpus
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


@pytest.fixture
def one_cpu_quota(tmp_path, monkeypatch):
    """A process whose cgroup v2 quota is 1 CPU, on 8 CPUs by affinity, with torch set to 4 threads."""
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cpu.max").write_text("100000 100000\n")
    monkeypatch.setattr(cpus, "FILES_ROOT", tmp_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    yield tmp_path / "sys/fs/cgroup/cpu.max"
    torch.set_num_threads(before)


def test_torch_threads_0_never_exceeds_the_usable_cpus(one_cpu_quota):
    with torch_threads(0):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 4
    with torch_threads(3):  # a count > 0 is the user's choice
        assert torch.get_num_threads() == 3
    one_cpu_quota.write_text("max 100000\n")  # no quota: 8 CPUs, so torch's 4 threads are kept
    with torch_threads(0):
        assert torch.get_num_threads() == 4


def test_runner_and_pipe_under_a_one_cpu_quota_run_one_thread(one_cpu_quota, reference_bilm, fixture_dir, monkeypatch):
    seen = []
    class_forward = BiLM.forward

    def spying_class(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return class_forward(self, *args, **kwargs)

    monkeypatch.setattr(BiLM, "forward", spying_class)
    BiLMRunner(reference_bilm).embed_sentences([["a", "b"]])
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(fixture_dir)}})
    nlp("a b c")
    assert seen == [1, 1] and torch.get_num_threads() == 4
