"""A threads setting for the biLM that never leaks into the caller's torch state, and by default never more
threads than the CPUs the process may use (a faked cgroup quota), nor, where OpenMP's threads spin, than the
CPUs other work leaves idle (faked)."""

import os
from typing import Optional

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


def threads_at_each_forward(monkeypatch) -> list[int]:
    """torch's thread count at each BiLM.forward from now on (the list fills as the test runs)."""
    seen: list[int] = []
    class_forward = BiLM.forward

    def spying_class(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return class_forward(self, *args, **kwargs)

    monkeypatch.setattr(BiLM, "forward", spying_class)
    return seen


def runner_then_pipe(reference_bilm, fixture_dir) -> spacy.Language:
    """One batch through BiLMRunner, then one through a pipe of the fixture; the pipe, to run more."""
    BiLMRunner(reference_bilm).embed_sentences([["a", "b"]])
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(fixture_dir)}})
    nlp("a b c")
    return nlp


def test_runner_and_pipe_under_a_one_cpu_quota_run_one_thread(one_cpu_quota, reference_bilm, fixture_dir, monkeypatch):
    seen = threads_at_each_forward(monkeypatch)
    runner_then_pipe(reference_bilm, fixture_dir)
    assert seen == [1, 1] and torch.get_num_threads() == 4


class FakeOtherWork:
    """`cpus.OTHER_WORK` as a test sets it: (CPUs, other processes' work on them in CPUs), or None."""

    def __init__(self) -> None:
        self.measured: Optional[tuple[int, float]] = None

    def cpus(self) -> Optional[tuple[int, float]]:
        return self.measured


@pytest.fixture
def busy_cpus(one_cpu_quota, monkeypatch):
    """8 CPUs by affinity and no quota, torch set to 4 threads, OpenMP's wait policy torch's default (spinning),
    and other processes' work on the CPUs as the test sets it."""
    one_cpu_quota.write_text("max 100000\n")
    for name in cpus.OPENMP_WAIT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    work = FakeOtherWork()
    monkeypatch.setattr(cpus, "OTHER_WORK", work)
    return work


@pytest.mark.parametrize(("others", "threads"), [(None, 4), (0.2, 4), (4.0, 4), (5.6, 2), (7.0, 1), (8.0, 1)])
def test_where_openmp_spins_the_default_leaves_the_cpus_that_other_work_holds(busy_cpus, others, threads):
    """Spinning threads beside other work run several times slower than one (benchmarks/threads_busy.py)."""
    busy_cpus.measured = None if others is None else (8, others)
    with torch_threads(0, per_batch=True):
        assert torch.get_num_threads() == threads
    assert torch.get_num_threads() == 4
    with torch_threads(3, per_batch=True):  # a count > 0 is the user's choice, spinning or not
        assert torch.get_num_threads() == 3
    with torch_threads(0):  # around a whole run (pretrain, evaluate): a passing load would fix its threads
        assert torch.get_num_threads() == 4


@pytest.mark.parametrize("passive", [{"OMP_WAIT_POLICY": "PASSIVE"}, {"GOMP_SPINCOUNT": "0"}])
def test_where_openmp_waits_passively_the_default_is_every_usable_cpu(busy_cpus, monkeypatch, passive):
    """Sleeping threads give their cores back: all of them, whatever other work there is."""
    for name, value in passive.items():
        monkeypatch.setenv(name, value)
    busy_cpus.measured = (8, 8.0)
    with torch_threads(0, per_batch=True):
        assert torch.get_num_threads() == 4


def test_runner_and_pipe_beside_other_work_run_one_thread(busy_cpus, reference_bilm, fixture_dir, monkeypatch):
    seen = threads_at_each_forward(monkeypatch)
    busy_cpus.measured = (8, 8.0)
    nlp = runner_then_pipe(reference_bilm, fixture_dir)
    busy_cpus.measured = (8, 0.0)  # the other work has ended
    nlp("a b c")
    assert seen == [1, 1, 4] and torch.get_num_threads() == 4
