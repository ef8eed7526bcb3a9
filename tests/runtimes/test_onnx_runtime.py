"""The "onnxruntime" runtime's sessions: the session that reads a graph's metadata serves the first runner of
this process with its threads (one session a load, not two); every runner is the caller's own (its token
budget untouched by another's); a copy or a pickle of the loaded graph (what `embed`'s spawned workers get)
carries no session, so the parent frees its own and each worker makes one with its threads."""

import copy
import pickle

import onnxruntime
import pytest

from spacy_elmo.runtimes import RUNTIMES, RunSettings

RUNTIME = RUNTIMES["onnxruntime"]
SENTENCES = [["The", "cat", "sat", "."], ["a"]]


@pytest.fixture
def sessions(monkeypatch) -> list[object]:
    """Every ONNX Runtime session made while the test runs."""
    made: list[object] = []
    real = onnxruntime.InferenceSession

    def counted(*args, **kwargs):
        session = real(*args, **kwargs)
        made.append(session)
        return session

    monkeypatch.setattr(onnxruntime, "InferenceSession", counted)
    return made


def settings(n_threads: int, token_budget: int) -> RunSettings:
    return RunSettings(runtime="onnxruntime", n_threads=n_threads, token_budget=token_budget)


def test_the_session_that_read_the_metadata_serves_the_first_runner(fixture_graph_file, sessions):
    loaded = RUNTIME.load(str(fixture_graph_file.path), None, 2)
    assert loaded.options.output_dim > 0 and len(sessions) == 1  # the metadata, read by a session
    first = RUNTIME.runner(settings(2, 100), loaded)
    first.embed_sentences(SENTENCES)
    assert len(sessions) == 1
    second = RUNTIME.runner(settings(2, 5000), loaded)
    assert second is not first and (first.token_budget, second.token_budget) == (100, 5000)
    second.embed_sentences(SENTENCES)
    assert len(sessions) == 2


def test_a_runner_of_other_threads_gets_a_session_of_its_own(fixture_graph_file, sessions):
    loaded = RUNTIME.load(str(fixture_graph_file.path), None, 2)
    loaded.describe()
    runner = RUNTIME.runner(settings(3, 0), loaded)
    runner.embed_sentences(SENTENCES)
    assert len(sessions) == 2
    assert runner.session().get_session_options().intra_op_num_threads == 3


@pytest.mark.parametrize("duplicate", [copy.copy, lambda graph: pickle.loads(pickle.dumps(graph))])
def test_a_copy_or_pickle_carries_no_session(fixture_graph_file, sessions, duplicate):
    loaded = RUNTIME.load(str(fixture_graph_file.path), None, 2)
    assert loaded.options.output_dim > 0 and len(sessions) == 1
    given = duplicate(loaded)
    assert given.options == loaded.options and len(sessions) == 1  # the metadata travels, the session does not
    runner = RUNTIME.runner(settings(2, 0), given)  # the same threads: still a session of its own
    runner.embed_sentences(SENTENCES)
    assert len(sessions) == 2
    assert runner.session().get_session_options().intra_op_num_threads == 2
