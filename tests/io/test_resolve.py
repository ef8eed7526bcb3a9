"""Resolving what a user points at: a shipped name, "" (the default), a native or bilm-tf directory, an
.hdf5 file; every error names the path and the option it came from; what is no model this loads (an ONNX
graph) or is ambiguous (two weight files) is said as such."""

import re
import shutil

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.cli import elmo_cli
from spacy_elmo.errors import named_settings
from spacy_elmo.io.hdf5 import save_bilm_tf
from spacy_elmo.io.native import save_native
from spacy_elmo.io.resolve import (
    DEFAULT_MODEL,
    available_models,
    load_model,
    resolve_model,
    shipped_model_path,
)


def test_the_default_and_a_shipped_name_are_the_shipped_native_model():
    assert DEFAULT_MODEL in available_models()
    default, named = resolve_model(""), resolve_model(DEFAULT_MODEL)
    assert default.kind == named.kind == "native"
    assert default.path == named.path == shipped_model_path()


def test_bilm_tf_directory_and_hdf5_file(fixture_dir, tmp_path):
    directory = resolve_model(fixture_dir)
    assert (directory.kind, directory.weight_file.name, directory.options_file.name) == (
        "bilm-tf",
        "lm_weights.hdf5",
        "options.json",
    )
    single = resolve_model(fixture_dir / "lm_weights.hdf5")
    assert single.weight_file == directory.weight_file and single.options_file == directory.options_file
    elsewhere = tmp_path / "opts.json"
    shutil.copy(fixture_dir / "options.json", elsewhere)
    assert resolve_model(fixture_dir / "lm_weights.hdf5", options_file=elsewhere).options_file == elsewhere


def test_native_directory_loads_the_same_weights(reference_bilm, tmp_path):
    directory = save_native(reference_bilm, tmp_path / "native")
    assert resolve_model(directory).kind == "native"
    loaded = load_model(directory).bilm
    assert loaded.options.to_dict() == reference_bilm.options.to_dict()


def test_errors_name_the_path_and_the_option(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"^my\.option: .*'.*nowhere' does not exist.*en_elmo_small"):
        with named_settings(path="my.option"):
            resolve_model(tmp_path / "nowhere")
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.hdf5").write_bytes(b"")
    (tmp_path / "two" / "b.hdf5").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"two: expected a native model .* found 2"):
        resolve_model(tmp_path / "two")


@pytest.mark.parametrize("name", ["x" * 5000, "a/" * 3000, "bad\x00name"])
def test_a_path_the_system_cannot_take_is_a_missing_path_shown_short(name):
    with pytest.raises(FileNotFoundError, match="does not exist") as caught:
        load_model(name)
    assert len(str(caught.value)) < 1000  # a 5,000-character name is shortened in the message


def test_a_missing_default_model_says_how_to_give_one(monkeypatch, tmp_path):
    import spacy_elmo.io.resolve as resolve

    monkeypatch.setattr(resolve, "SHIPPED_MODELS_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="default biLM 'en_elmo_small' is not installed.*Give a model"):
        resolve_model("")


def onnx_graph() -> bytes:
    """A real (tiny) ONNX graph, as the onnx package serializes one: what `spacy elmo export` writes is one."""
    import onnx
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [value], [out])
    model = helper.make_model(graph, producer_name="spacy-elmo")
    model.metadata_props.add(key="spacy_elmo.format", value="test")
    onnx.checker.check_model(model)
    return model.SerializeToString()


ONNX_SAID = (
    r" is an ONNX graph \(spacy elmo export's output\): serve it with runtime onnxruntime \(embed --runtime "
    r"onnxruntime; the pipe's runtime = \"onnxruntime\"\); convert/verify/evaluate/export need the model it was "
    r"exported from"
)


@pytest.mark.parametrize("name", ["m.onnx", "M.ONNX", "renamed.bin", "weights.hdf5"])
def test_an_onnx_graph_is_named_as_one_by_its_suffix_or_its_bytes(fixture_dir, tmp_path, name):
    """Not "options file not found" nor "not a readable HDF5 weight file" (with options.json beside it)."""
    (tmp_path / name).write_bytes(onnx_graph())
    shutil.copy(fixture_dir / "options.json", tmp_path / "options.json")
    with pytest.raises(ValueError, match="^MODEL: " + re.escape(str(tmp_path / name)) + ONNX_SAID):
        with named_settings(path="MODEL"):
            load_model(tmp_path / name)


def test_a_weight_file_or_other_bytes_are_not_taken_for_an_onnx_graph(fixture_dir, tmp_path):
    from spacy_elmo.io.resolve import is_onnx_graph

    assert not is_onnx_graph(fixture_dir / "lm_weights.hdf5") and not is_onnx_graph(fixture_dir / "options.json")
    graph = onnx_graph()
    for i, damaged in enumerate([graph[:-1], graph + b"\x00", b"\x10" + graph[1:], b"", b"\x08"]):
        (tmp_path / f"{i}.bin").write_bytes(damaged)
        assert not is_onnx_graph(tmp_path / f"{i}.bin"), damaged[:8]
    (tmp_path / "x.onnx").write_bytes((fixture_dir / "lm_weights.hdf5").read_bytes())  # HDF5, whatever its name
    assert not is_onnx_graph(tmp_path / "x.onnx")


def test_a_directory_with_two_weight_files_is_refused_listing_them(fixture_dir, tmp_path):
    """As the same files zipped are: which one is the model's is not known. The .hdf5 file itself loads."""
    model = tmp_path / "model"
    shutil.copytree(fixture_dir, model)
    other = load_model(fixture_dir).bilm
    with torch.no_grad():
        next(other.parameters()).mul_(2)
    save_bilm_tf(other, tmp_path / "other.json", model / "weights.hdf5")
    with pytest.raises(
        ValueError,
        match=rf"^{re.escape(str(model))}: holds 2 weight files \(weights\.hdf5, lm_weights\.hdf5\); which one is the "
        rf"model's cannot be chosen: give the \.hdf5 file you mean \(e\.g\. {re.escape(str(model / 'weights.hdf5'))}; "
        r"the options\.json beside it is read\)$",
    ):
        resolve_model(model)
    for name in ("lm_weights.hdf5", "weights.hdf5"):
        loaded = load_model(model / name)
        assert loaded.source.weight_file == model / name and loaded.source.options_file == model / "options.json"
    assert load_model(model / "lm_weights.hdf5").sha256 == load_model(fixture_dir).sha256
    assert load_model(model / "weights.hdf5").sha256 != load_model(fixture_dir).sha256


@pytest.mark.parametrize(
    "command",
    [
        ["embed", "{graph}", "{text}", "{tmp}/out.hdf5"],
        ["verify", "{graph}"],
        ["evaluate", "{graph}", "{text}"],
        ["convert", "{graph}", "{tmp}/d"],
        ["export", "{graph}", "{tmp}/x.onnx"],
    ],
)
def test_an_onnx_graph_given_to_a_torch_command_says_how_to_serve_it(fixture_dir, tmp_path, command):
    """Not "options file not found: options.json" (nor, with options.json beside it, "not a readable HDF5
    weight file")."""
    graph = tmp_path / "m.onnx"
    graph.write_bytes(onnx_graph())
    shutil.copy(fixture_dir / "options.json", tmp_path / "options.json")
    fill = {"graph": graph, "text": fixture_dir / "vocab_test.txt", "tmp": tmp_path}
    before = sorted(p.name for p in tmp_path.iterdir())
    done = CliRunner().invoke(elmo_cli, [part.format(**fill) for part in command])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
    said = rf"error: (MODEL|SOURCE): {re.escape(str(graph))}{ONNX_SAID}"
    assert re.fullmatch(said, done.output.strip().splitlines()[-1]), done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
