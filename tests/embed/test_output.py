"""`spacy elmo embed`: every line embedded, layers reduced as asked, resumable, workers agree."""

import json
import os
import subprocess
import sys

import h5py
import numpy
import pytest

from kills import at_call, at_nth_dataset, run_killed, sha256_of
from spacy_elmo.bilm.batching import embed_windowed
from spacy_elmo.bilm.runner import BiLMRunner
from spacy_elmo.embed import EmbedSettings, embed_file, output
from spacy_elmo.embed.store import OutputError, PartialRun, dataset_digest, partial_dir
from spacy_elmo.io.native import save_native
from spacy_elmo.io.resolve import load_model

LINES = ["The cat sat on the mat .", "", "Ünïcödé 日本語 👍🏽 text", "x" * 300, "a b c d e f g h i j k"]


def read_all(path):
    with h5py.File(path, "r") as handle:
        return {key: handle[key][...] for key in handle.keys()}


def test_embeds_every_line_with_reference_values(reference_bilm, fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    assert embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), layers="all")) == len(LINES)
    data = read_all(out)
    assert sorted(data, key=int) == [str(i) for i in range(len(LINES))]
    expected = BiLMRunner(reference_bilm).embed_sentences([line.split() for line in LINES])
    for i, array in enumerate(expected):
        assert data[str(i)].shape == array.shape
        numpy.testing.assert_allclose(data[str(i)], array, atol=1e-6, rtol=0)
    assert data["1"].shape == (3, 0, 32)


@pytest.mark.parametrize("layers,reduce", [("top", lambda a: a[-1]), ("average", lambda a: a.mean(0))])
def test_top_and_average(fixture_dir, text_file, tmp_path, layers, reduce):
    all_layers = tmp_path / "all.hdf5"
    embed_file(text_file, all_layers, EmbedSettings(model=str(fixture_dir)))
    reduced = tmp_path / f"{layers}.hdf5"
    embed_file(text_file, reduced, EmbedSettings(model=str(fixture_dir), layers=layers))
    full, small = read_all(all_layers), read_all(reduced)
    for key in full:
        numpy.testing.assert_allclose(small[key], reduce(full[key]), atol=1e-6)


def test_a_rerun_embeds_only_the_chunks_not_yet_finished(fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    settings = EmbedSettings(model=str(fixture_dir), chunk_size=2)
    run_killed(lambda: embed_file(text_file, out, settings), at_call(PartialRun, "write_chunk", after=True, n=1))
    assert not out.exists() and partial_dir(out).is_dir()
    assert embed_file(text_file, out, settings) == len(LINES) - 2  # chunk 0 (lines 0 and 1) was kept
    assert sorted(read_all(out), key=int) == [str(i) for i in range(len(LINES))]
    assert not partial_dir(out).exists()
    assert embed_file(text_file, out, settings) == 0  # finished: nothing to do


def test_jsonl_and_errors(fixture_dir, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"text": "hello world"}) + "\n" + json.dumps({"body": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"in\.jsonl, line 2: no 'text' field \(set --text-field\)"):
        embed_file(path, tmp_path / "o.hdf5", EmbedSettings(model=str(fixture_dir)))
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        embed_file(tmp_path / "missing.txt", tmp_path / "o2.hdf5", EmbedSettings(model=str(fixture_dir)))


@pytest.mark.slow
def test_two_workers_do_not_hang_on_a_real_model_with_torchs_threads(tmp_path):
    """The shipped model's weights are large enough for torch's parallel fill: a forked worker that built
    them in the OpenMP pool inherited from its parent would wait forever (the suite's one thread hides it)."""
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    command = [sys.executable, "-m", "spacy_elmo", "embed", "en_elmo_small", str(path), str(tmp_path / "out.hdf5")]
    done = subprocess.run([*command, "--workers", "2"], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(read_all(tmp_path / "out.hdf5"), key=int) == [str(i) for i in range(len(LINES))]


@pytest.mark.slow
def test_cli_with_two_workers_matches_one(fixture_dir, text_file, tmp_path):
    outputs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}.hdf5"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "spacy_elmo",
                "embed",
                str(fixture_dir),
                str(text_file),
                str(out),
                "--layers",
                "top",
                "--workers",
                str(workers),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(read_all(out))
    assert outputs[0].keys() == outputs[1].keys()
    for key in outputs[0]:
        numpy.testing.assert_allclose(outputs[0][key], outputs[1][key], atol=1e-6)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_embed_at_a_precision_is_the_runners(reference_bilm, fixture_dir, text_file, tmp_path, precision):
    out = tmp_path / "out.hdf5"
    embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), precision=precision))
    data = read_all(out)
    expected = BiLMRunner(reference_bilm, precision=precision).embed_sentences([line.split() for line in LINES])
    for i, array in enumerate(expected):
        assert data[str(i)].dtype == numpy.float32
        assert numpy.array_equal(data[str(i)], array)
    with h5py.File(out, "r") as handle:
        assert json.loads(handle.attrs["binding"])["settings"]["precision"] == precision


def test_embed_refuses_a_bad_precision_before_reading_anything(fixture_dir, tmp_path):
    with pytest.raises(ValueError, match="^--precision: must be one of 'fp32', 'bf16', 'fp16', 'int8', got 'int4'"):
        EmbedSettings(model=str(fixture_dir), precision="int4")
    with pytest.raises(ValueError, match="CPU only"):
        EmbedSettings(model=str(fixture_dir), precision="int8", device="cuda:0")


@pytest.mark.parametrize(
    "setting,value,message",
    [
        ("n_threads", -1, r"^--threads: must be an integer >= 0 \(0 = the runtime's own setting\), got -1"),
        ("token_budget", 0, "^--batch-tokens: must be an integer >= 1, got 0"),
        ("token_budget", "2", "^--batch-tokens: must be an integer >= 1, got '2'"),
        ("dtype", "float64", "^--dtype: must be one of float32, float16, got 'float64'"),
        ("layers", "bottom", "^--layers: must be one of all, top, average, got 'bottom'"),
        ("precision", "fp16", "^--precision: 'fp16' is for GPUs .* on the CPU use precision 'bf16' or 'fp32'"),
    ],
)
def test_a_bad_setting_names_the_option(fixture_dir, setting, value, message):
    with pytest.raises(ValueError, match=message):
        EmbedSettings(model=str(fixture_dir), **{setting: value})


def test_bad_cli_values_are_one_line_errors_not_tracebacks(fixture_dir, text_file, tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import elmo_cli

    for option, value, said in (
        ("--precision", "fp8", "--precision: must be one of"),
        ("--threads", "-1", "--threads: must be an integer >= 0"),
        ("--workers", "0", "--workers: must be an integer >= 1"),
    ):
        out = tmp_path / f"{option[2:]}.hdf5"
        result = CliRunner().invoke(elmo_cli, ["embed", str(fixture_dir), str(text_file), str(out), option, value])
        assert result.exit_code == 1 and said in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert not out.exists(), "nothing is written for a refused setting"


def test_merging_a_file_that_is_not_hdf5_names_it(tmp_path):
    from spacy_elmo.embed import ShardError, merge_shards

    for name, content, said in (
        ("truncated.hdf5", b"\x89HDF\r\n\x1a\n" + b"\0" * 20, "an HDF5 file that cannot be read"),
        ("text.hdf5", b"not hdf5", r"not an embed shard \(not HDF5\); give the files that `embed --shard` wrote"),
    ):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ShardError, match=rf"{name}: {said}"):
            merge_shards([tmp_path / name], tmp_path / "merged.hdf5")
    assert not (tmp_path / "merged.hdf5").exists()


def test_a_model_that_does_not_load_leaves_no_output(text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        embed_file(text_file, out, EmbedSettings(model=str(tmp_path / "nowhere")))
    assert not out.exists()


def cli_embed(fixture_dir, text_file, out, *options):
    from typer.testing import CliRunner

    from spacy_elmo.cli import elmo_cli

    args = ["embed", str(fixture_dir), str(text_file), str(out), "--chunk-lines", "2", *options]
    return CliRunner().invoke(elmo_cli, args)


N_CHUNK_DATASETS = len(LINES)  # every line is written once into its chunk file, then once into the output

KILL_POINTS = {
    "before the model loads": at_call(output, "load_embed_model"),
    "before the first chunk": at_call(output, "_embed_chunk"),
    "while writing the first chunk": at_nth_dataset(1),
    "between chunks": at_call(PartialRun, "write_chunk", after=True, n=2),
    "while assembling the output": at_nth_dataset(N_CHUNK_DATASETS + 2),
    "after publishing, before tidying up": at_call(PartialRun, "discard"),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_at_any_point_a_rerun_gives_the_uninterrupted_file(fixture_dir, text_file, tmp_path, point):
    """SIGKILL, then the README's recipe (run the same command again): the very bytes of a run never killed."""
    whole = tmp_path / "whole.hdf5"
    assert cli_embed(fixture_dir, text_file, whole).exit_code == 0
    out = tmp_path / "out.hdf5"
    run_killed(lambda: cli_embed(fixture_dir, text_file, out), KILL_POINTS[point])
    if point == "before the model loads":
        assert not out.exists() and not partial_dir(out).exists()
    elif point == "after publishing, before tidying up":
        assert out.exists() and partial_dir(out).exists()
    else:
        assert not out.exists(), "an output only ever appears whole"
    again = cli_embed(fixture_dir, text_file, out)
    assert again.exit_code == 0, again.output
    assert sha256_of(out) == sha256_of(whole)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input.txt", "out.hdf5", "whole.hdf5"]


def test_a_resumed_run_refuses_changed_settings_or_input_naming_them(fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    settings = EmbedSettings(model=str(fixture_dir), chunk_size=2)
    run_killed(lambda: embed_file(text_file, out, settings), at_call(PartialRun, "write_chunk", after=True, n=1))
    kept = sorted(p.name for p in partial_dir(out).iterdir())
    with pytest.raises(OutputError, match=r"settings\.layers: 'all' then, 'top' now\. Run it again as it was started"):
        embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), chunk_size=2, layers="top"))
    with pytest.raises(OutputError, match=r"settings\.window_size: 128 then, 64 now"):
        embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), chunk_size=2, window_size=64))
    old = sha256_of(text_file)
    text_file.write_text("An edited first line .\n" + "\n".join(LINES[1:]) + "\n", encoding="utf-8")
    with pytest.raises(OutputError, match=rf"input\.sha256: '{old}' then, '{sha256_of(text_file)}' now"):
        embed_file(text_file, out, settings)
    assert sorted(p.name for p in partial_dir(out).iterdir()) == kept and not out.exists()  # nothing lost


def test_a_finished_output_refuses_a_run_with_another_model(reference_bilm, fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    embed_file(text_file, out, EmbedSettings(model=str(fixture_dir)))
    before = sha256_of(out)
    model = tmp_path / "model"
    save_native(reference_bilm, model)  # the same weights, another format: another digest
    with pytest.raises(OutputError, match=r"already holds a finished output of another model.*model\.sha256"):
        embed_file(text_file, out, EmbedSettings(model=str(model)))
    assert sha256_of(out) == before


def test_an_output_records_the_model_input_and_settings_by_content(fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.hdf5"
    embed_file(text_file, out, EmbedSettings(model=str(fixture_dir), layers="top"))
    with h5py.File(out, "r") as handle:
        attrs = dict(handle.attrs)
        binding = json.loads(attrs["binding"])
        datasets = [(name, handle[name][...]) for name in sorted(handle.keys(), key=int)]
    assert attrs["format"] == "spacy-elmo.embed.v2" and attrs["complete"] and attrs["n_input_lines"] == len(LINES)
    assert binding["input"]["sha256"] == sha256_of(text_file)
    assert binding["model"]["sha256"] == load_model(str(fixture_dir)).sha256  # what `verify` prints and a pin is
    assert binding["settings"]["layers"] == "top" and binding["shard"] is None
    assert attrs["vectors_sha256"] == dataset_digest(datasets)


def test_a_long_line_is_windowed_within_bounded_memory(fixture_dir, tmp_path):
    """A line longer than the window gets the pipe's windows; short lines are untouched by that."""
    words = [f"w{i % 50}" for i in range(300)]
    path = tmp_path / "long.txt"
    path.write_text(" ".join(words) + "\nshort line\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    embed_file(path, out, EmbedSettings(model=str(fixture_dir), window_size=40, window_context=5))
    runner = BiLMRunner(load_model(str(fixture_dir)).bilm)
    expected = embed_windowed(runner, [words, ["short", "line"]], 40, 5)
    data = read_all(out)
    assert data["0"].shape == (3, 300, 32)
    assert numpy.array_equal(data["0"], expected[0]) and numpy.array_equal(data["1"], expected[1])


@pytest.fixture(scope="module")
def fixture_graph(fixture_graph_file):
    return fixture_graph_file.path  # the run's one export of the fixture (read-only)


def test_the_onnx_runtime_embeds_the_torch_runtimes_layers(fixture_dir, fixture_graph, text_file, tmp_path):
    torch_out, graph_out, exported_out = (tmp_path / f"{name}.hdf5" for name in ("torch", "graph", "exported"))
    embed_file(text_file, torch_out, EmbedSettings(model=str(fixture_dir), chunk_size=2))
    assert cli_embed(fixture_graph, text_file, graph_out, "--runtime", "onnxruntime").exit_code == 0
    # any other model is exported first; two workers get the exported graph
    embed_file(
        text_file, exported_out, EmbedSettings(model=str(fixture_dir), chunk_size=2, runtime="onnxruntime"), workers=2
    )
    expected, served, exported = read_all(torch_out), read_all(graph_out), read_all(exported_out)
    assert expected.keys() == served.keys() == exported.keys()
    for key, layers in expected.items():
        assert served[key].shape == layers.shape == exported[key].shape
        if layers.size:
            scale = numpy.abs(layers).max(axis=(1, 2))
            for got in (served[key], exported[key]):
                assert (numpy.abs(got - layers).max(axis=(1, 2)) / scale).max() <= 1e-5, key
    with h5py.File(graph_out, "r") as handle:
        binding = json.loads(handle.attrs["binding"])
    assert binding["settings"]["runtime"] == "onnxruntime"
    assert binding["model"]["format"] == "onnx" and binding["model"]["sha256"] == sha256_of(fixture_graph)
    with pytest.raises(OutputError, match=r"settings\.runtime: 'onnxruntime' then, 'torch' now|another model"):
        embed_file(text_file, exported_out, EmbedSettings(model=str(fixture_dir), chunk_size=2))


def test_the_onnx_runtime_refuses_what_it_cannot_do(fixture_graph):
    with pytest.raises(
        ValueError,
        match=r"^--precision: 'bf16': the exported graph runs in fp32; use precision 'fp32', or use runtime 'torch'",
    ):
        EmbedSettings(model=str(fixture_graph), runtime="onnxruntime", precision="bf16")
    with pytest.raises(ValueError, match=r"^--runtime: must be one of torch, onnxruntime, got 'tf'"):
        EmbedSettings(model=str(fixture_graph), runtime="tf")


def test_an_aligned_output_is_the_layers_times_the_matrix_and_bound_to_its_file(fixture_dir, text_file, tmp_path):
    import torch

    matrix = numpy.random.default_rng(0).normal(size=(32, 32)).astype(numpy.float32)
    torch.save(matrix, tmp_path / "en_best_mapping.pth", _use_new_zipfile_serialization=False)
    plain, aligned = tmp_path / "plain.hdf5", tmp_path / "aligned.hdf5"
    embed_file(text_file, plain, EmbedSettings(model=str(fixture_dir)))
    settings = EmbedSettings(model=str(fixture_dir), chunk_size=2, alignment=str(tmp_path / "en_best_mapping.pth"))
    run_killed(lambda: embed_file(text_file, aligned, settings), at_call(PartialRun, "write_chunk", after=True, n=1))
    torch.save(matrix * 2, tmp_path / "en_best_mapping.pth", _use_new_zipfile_serialization=False)
    with pytest.raises(OutputError, match=r"settings\.alignment_sha256: '[0-9a-f]{64}' then, '[0-9a-f]{64}' now"):
        embed_file(text_file, aligned, settings)  # another matrix under a resumable output: refused
    torch.save(matrix, tmp_path / "en_best_mapping.pth", _use_new_zipfile_serialization=False)
    embed_file(text_file, aligned, settings)
    before, after = read_all(plain), read_all(aligned)
    assert sorted(before) == sorted(after)
    for key in before:
        numpy.testing.assert_allclose(after[key], numpy.matmul(before[key], matrix.T), rtol=1e-5, atol=1e-5)
    with h5py.File(plain, "r") as handle:
        assert "alignment" not in handle.attrs["binding"]  # an unaligned output's binding as it was


def test_the_cli_aligns_with_a_file_and_refuses_auto_without_one_in_one_line(fixture_dir, text_file, tmp_path):
    import torch
    from typer.testing import CliRunner

    from spacy_elmo.cli import elmo_cli

    matrix = numpy.random.default_rng(2).normal(size=(32, 32)).astype(numpy.float32)
    torch.save(matrix, tmp_path / "m.pth", _use_new_zipfile_serialization=False)
    command = ["embed", str(fixture_dir), str(text_file)]
    done = CliRunner().invoke(elmo_cli, [*command, str(tmp_path / "cli.hdf5"), "--alignment", str(tmp_path / "m.pth")])
    assert done.exit_code == 0, done.output
    embed_file(
        text_file, tmp_path / "api.hdf5", EmbedSettings(model=str(fixture_dir), alignment=str(tmp_path / "m.pth"))
    )
    cli, api = read_all(tmp_path / "cli.hdf5"), read_all(tmp_path / "api.hdf5")
    assert sorted(cli) == sorted(api) and all(numpy.array_equal(cli[k], api[k]) for k in cli)
    done = CliRunner().invoke(elmo_cli, [*command, str(tmp_path / "auto.hdf5"), "--alignment", "auto"])
    errors = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert done.exit_code == 1 and len(errors) == 1, done.output
    assert errors[0].startswith('error: --alignment: "auto" takes the one .pth file beside the model'), errors
    assert not (tmp_path / "auto.hdf5").exists()
    for given, said in ((tmp_path, "cannot be read"), (tmp_path / "none.pth", "cannot be read")):
        done = CliRunner().invoke(elmo_cli, [*command, str(tmp_path / "bad.hdf5"), "--alignment", str(given)])
        errors = [line for line in done.output.splitlines() if line.startswith("error:")]
        assert done.exit_code == 1 and len(errors) == 1 and "Traceback" not in done.output, done.output
        assert errors[0].startswith(f"error: --alignment: {given}: {said}"), errors
