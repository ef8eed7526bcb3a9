"""A runtime is one module and one line in `RUNTIMES`: a toy one, registered for these tests only, serves the
`elmo` pipe and `embed` alike, with its limits checked the same way for both."""

from typing import Any, Optional

import h5py
import numpy
import pytest
import spacy

from fixture_paths import ELMO_FIXTURE
from spacy_elmo.embed import EmbedSettings, embed_file
from spacy_elmo.errors import SettingError
from spacy_elmo.runtimes import RUNTIMES, RunSettings
from spacy_elmo.runtimes.torch import TorchRuntime

TEXTS = ["The cat sat on the mat .", "A b c d e f g ."]


class ToyRuntime(TorchRuntime):
    """The torch runtime, recording what it is asked, with a limit of its own."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def check(self, run: RunSettings) -> None:
        if run.stateful:
            raise SettingError("true: the toy runtime is stateless", "stateful")
        super().check(run)

    def load(self, *args: Any) -> Any:
        self.calls.append("load")
        return super().load(*args)

    def runner(self, run: RunSettings, loaded: Optional[Any] = None, load: Optional[Any] = None) -> Any:
        self.calls.append("runner")
        return super().runner(run, loaded, load)


@pytest.fixture
def toy():
    RUNTIMES["toy"] = runtime = ToyRuntime()
    yield runtime
    del RUNTIMES["toy"]


def elmo_nlp(runtime: str, **config: Any) -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(ELMO_FIXTURE), "runtime": runtime, **config}})
    return nlp


def test_a_registered_runtime_serves_the_pipe(toy):
    expected = [doc._.elmo_layers for doc in elmo_nlp("torch").pipe(TEXTS)]
    nlp = elmo_nlp("toy")
    assert toy.calls == ["runner"]  # building the pipe reads no file
    got = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]
    assert toy.calls == ["runner", "load"] and nlp.get_pipe("elmo").runtime == "toy"
    for a, b in zip(expected, got):
        assert numpy.array_equal(a, b)


def test_a_registered_runtime_serves_embed(toy, tmp_path):
    text = tmp_path / "input.txt"
    text.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    for runtime in ("torch", "toy"):
        embed_file(text, tmp_path / f"{runtime}.hdf5", EmbedSettings(model=str(ELMO_FIXTURE), runtime=runtime))
    assert toy.calls == ["load", "runner"]
    with h5py.File(tmp_path / "torch.hdf5", "r") as torch_out, h5py.File(tmp_path / "toy.hdf5", "r") as toy_out:
        assert sorted(torch_out.keys()) == sorted(toy_out.keys()) == ["0", "1"]
        for key in torch_out.keys():
            assert numpy.array_equal(torch_out[key][...], toy_out[key][...])


def test_its_limits_and_name_are_checked_as_the_others_are(toy):
    with pytest.raises(ValueError, match="^spacy-elmo.BiLM.v1 stateful: true: the toy runtime is stateless$"):
        elmo_nlp("toy", stateful=True)
    with pytest.raises(ValueError, match="^--runtime: must be one of torch, onnxruntime, toy, got 'tf'$"):
        EmbedSettings(model=str(ELMO_FIXTURE), runtime="tf")


def test_an_unregistered_runtime_is_refused():
    with pytest.raises(ValueError, match="^--runtime: must be one of torch, onnxruntime, got 'toy'$"):
        EmbedSettings(model=str(ELMO_FIXTURE), runtime="toy")
