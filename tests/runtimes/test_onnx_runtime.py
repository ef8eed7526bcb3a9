"""The "onnxruntime" runtime's sessions: loading a graph reads its metadata from the bytes, with no session;
each runner is the caller's own, with the one session it serves with (its token budget untouched by another's);
what `embed`'s spawned workers are given (the loaded graph, pickled) carries no session."""

import hashlib
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


def test_a_load_reads_the_metadata_without_a_session(fixture_graph_file, sessions):
    loaded = RUNTIME.load(str(fixture_graph_file.path), None)
    described = loaded.describe()
    assert loaded.options.output_dim > 0
    assert described["sha256"] == hashlib.sha256(fixture_graph_file.path.read_bytes()).hexdigest()
    assert sessions == []


def test_each_runner_is_its_own_with_one_session(fixture_graph_file, sessions):
    loaded = RUNTIME.load(str(fixture_graph_file.path), None)
    first = RUNTIME.runner(settings(2, 100), loaded)
    first.embed_sentences(SENTENCES)
    assert len(sessions) == 1
    second = RUNTIME.runner(settings(3, 5000), loaded)
    assert second is not first and (first.token_budget, second.token_budget) == (100, 5000)
    second.embed_sentences(SENTENCES)
    assert len(sessions) == 2
    assert second.session().get_session_options().intra_op_num_threads == 3


def test_a_pickled_graph_carries_no_session(fixture_graph_file, sessions):
    loaded = RUNTIME.load(str(fixture_graph_file.path), None)
    loaded.describe()
    given = pickle.loads(pickle.dumps(loaded))
    assert given.options == loaded.options and sessions == []
    runner = RUNTIME.runner(settings(1, 0), given)
    runner.embed_sentences(SENTENCES)
    assert len(sessions) == 1
    assert runner.session().get_session_options().intra_op_num_threads == 1
