"""`embed --format parquet`: the HDF5 output's vectors as rows, read back with pyarrow and numpy alone, bound
to model, input and settings, resumed after a kill with the bytes of an uninterrupted run."""

import json

import h5py
import numpy
import pyarrow
import pyarrow.parquet
import pytest

from kills import at_call, run_killed, sha256_of
from spacy_elmo.embed import EmbedSettings, embed_file, output
from spacy_elmo.embed.store import OutputError, PartialRun, partial_dir

LINES = [
    "The cat sat on the mat .",
    "",
    "Ünïcödé 日本語 👍🏽 text",
    " ".join(f"w{i % 50}" for i in range(300)),
    "a b c",
]


def read_rows(path):
    """Each row's (line, tokens, vectors) with pyarrow and numpy only: what a user without spacy-elmo does."""
    table = pyarrow.parquet.read_table(path)
    vectors_type = table.schema.field("elmo").type
    all_layers = pyarrow.types.is_fixed_size_list(vectors_type)
    width = (vectors_type.value_type.value_type if all_layers else vectors_type.value_type).list_size
    rows = []
    for record in table.to_pylist():
        values = numpy.asarray(record["elmo"], dtype=numpy.float32)
        shape = (vectors_type.list_size, len(record["tokens"]), width) if all_layers else (len(record["tokens"]), width)
        rows.append((record["line"], record["tokens"], values.reshape(shape)))
    return rows


def recorded(path):
    return json.loads(pyarrow.parquet.ParquetFile(path).metadata.metadata[b"spacy_elmo.embed"])


@pytest.mark.parametrize("layers", ["all", "top"])
def test_parquet_holds_the_hdf5_outputs_vectors_bit_for_bit(fixture_dir, text_file, tmp_path, layers):
    settings = EmbedSettings(model=str(fixture_dir), layers=layers, chunk_size=2)
    embed_file(text_file, tmp_path / "out.hdf5", settings)
    assert embed_file(text_file, tmp_path / "out.parquet", settings, output_format="parquet") == len(LINES)
    rows = read_rows(tmp_path / "out.parquet")
    assert [line for line, _, _ in rows] == list(range(len(LINES)))
    assert [tokens for _, tokens, _ in rows] == [line.split() for line in LINES]
    with h5py.File(tmp_path / "out.hdf5", "r") as handle:
        for line, _, vectors in rows:
            expected = handle[str(line)][...]
            assert vectors.shape == expected.shape and numpy.array_equal(vectors, expected), line
        content = handle.attrs["vectors_sha256"]
        binding = json.loads(handle.attrs["binding"])
    record = recorded(tmp_path / "out.parquet")
    assert record["vectors_sha256"] == content  # the same vectors: the same digest in either format
    assert record["binding"] == {**binding, "input": record["binding"]["input"]} and record["n_input_lines"] == 5
    assert pyarrow.parquet.ParquetFile(tmp_path / "out.parquet").num_row_groups == 3  # one a chunk of 2 lines
    assert embed_file(text_file, tmp_path / "out.parquet", settings, output_format="parquet") == 0  # finished


def test_the_cli_writes_parquet_for_a_parquet_name_or_when_told(fixture_dir, text_file, tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import elmo_cli

    def run(out, *options):
        args = ["embed", str(fixture_dir), str(text_file), str(out), "--layers", "top", *options]
        return CliRunner().invoke(elmo_cli, args)

    assert run(tmp_path / "a.parquet").exit_code == 0
    assert run(tmp_path / "b.table", "--format", "parquet").exit_code == 0
    assert sha256_of(tmp_path / "a.parquet") == sha256_of(tmp_path / "b.table")
    assert run(tmp_path / "c.hdf5").exit_code == 0 and h5py.is_hdf5(tmp_path / "c.hdf5")
    refused = run(tmp_path / "d.parquet", "--format", "csv")
    assert refused.exit_code != 0 and "--format must be one of hdf5, parquet, got 'csv'" in refused.output
    refused = run(tmp_path / "e.parquet", "--dtype", "float16")
    assert refused.exit_code != 0 and "--dtype float16 is for HDF5 output; Parquet output stores float32" in (
        refused.output
    )
    assert not (tmp_path / "d.parquet").exists() and not (tmp_path / "e.parquet").exists()


@pytest.mark.slow
def test_two_workers_write_the_bytes_of_one(fixture_dir, text_file, tmp_path):
    settings = EmbedSettings(model=str(fixture_dir), chunk_size=2, n_threads=1)
    for workers in (1, 2):
        assert embed_file(
            text_file, tmp_path / f"w{workers}.parquet", settings, output_format="parquet", workers=workers
        )
    assert sha256_of(tmp_path / "w1.parquet") == sha256_of(tmp_path / "w2.parquet")


PARQUET_KILL_POINTS = {
    "between chunks": at_call(PartialRun, "write_chunk", after=True, n=2),
    "while assembling the output": at_call(pyarrow.parquet.ParquetWriter, "write_batch", after=True, n=2),
    "after publishing, before tidying up": at_call(PartialRun, "discard"),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", PARQUET_KILL_POINTS)
def test_a_killed_parquet_run_rerun_gives_the_uninterrupted_bytes(fixture_dir, text_file, tmp_path, point):
    settings = EmbedSettings(model=str(fixture_dir), chunk_size=2)
    whole, out = tmp_path / "whole.parquet", tmp_path / "out.parquet"
    embed_file(text_file, whole, settings, output_format="parquet")
    run_killed(lambda: embed_file(text_file, out, settings, output_format="parquet"), PARQUET_KILL_POINTS[point])
    if point == "after publishing, before tidying up":
        assert out.exists() and partial_dir(out).exists()
    else:
        assert not out.exists(), "an output only ever appears whole"
    embed_file(text_file, out, settings, output_format="parquet")
    assert sha256_of(out) == sha256_of(whole)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input.txt", "out.parquet", "whole.parquet"]


def test_a_resumed_run_refuses_another_binding_and_a_damaged_output(fixture_dir, text_file, tmp_path):
    out = tmp_path / "out.parquet"
    settings = EmbedSettings(model=str(fixture_dir), chunk_size=2)
    embed_file(text_file, out, settings, output_format="parquet")
    with pytest.raises(OutputError, match=r"already holds a finished output.*settings\.layers: 'all' then, 'top' now"):
        embed_file(
            text_file, out, EmbedSettings(model=str(fixture_dir), chunk_size=2, layers="top"), output_format="parquet"
        )
    # one vector value changed, the file rewritten with its metadata: the recorded digest no longer fits
    table = pyarrow.parquet.read_table(out)
    rows = table.to_pylist()
    rows[0]["elmo"][0][0][0] += 1.0
    metadata = {b"spacy_elmo.embed": json.dumps(recorded(out)).encode("utf-8")}
    edited = pyarrow.Table.from_pylist(rows, schema=table.schema).replace_schema_metadata(metadata)
    pyarrow.parquet.write_table(edited, out)
    with pytest.raises(OutputError, match=r"out\.parquet: its datasets have SHA-256 .* the output was damaged"):
        embed_file(text_file, out, settings, output_format="parquet")
    hdf5 = tmp_path / "h.hdf5"
    embed_file(text_file, hdf5, settings)
    with pytest.raises(OutputError, match=r"h\.hdf5: OUTPUT exists and is not an embed output \(not Parquet\)"):
        embed_file(text_file, hdf5, settings, output_format="parquet")
    with pytest.raises(ValueError, match=r"--format must be one of hdf5, parquet, got 'xml'"):
        embed_file(text_file, tmp_path / "x.xml", settings, output_format="xml")


def test_parquet_shards_read_together_are_the_whole_output(fixture_dir, text_file, tmp_path):
    settings = EmbedSettings(model=str(fixture_dir), chunk_size=2, layers="top")
    embed_file(text_file, tmp_path / "whole.parquet", settings, output_format="parquet")
    for index in range(2):
        embed_file(text_file, tmp_path / "out.parquet", settings, shard=(index, 2), output_format="parquet")
    shards = sorted(tmp_path.glob("out.shard*-of-2.parquet"))
    assert [p.name for p in shards] == ["out.shard0-of-2.parquet", "out.shard1-of-2.parquet"]
    together = sorted((row for path in shards for row in read_rows(path)), key=lambda row: row[0])
    whole = read_rows(tmp_path / "whole.parquet")
    assert [(line, tokens) for line, tokens, _ in together] == [(line, tokens) for line, tokens, _ in whole]
    assert all(numpy.array_equal(a[2], b[2]) for a, b in zip(together, whole))


def test_the_run_is_the_same_runner_as_hdf5(fixture_dir, text_file, tmp_path, monkeypatch):
    """The Parquet output adds no embedding of its own: every chunk goes through `_embed_chunk`."""
    calls = []
    original = output._embed_chunk
    monkeypatch.setattr(output, "_embed_chunk", lambda chunk: calls.append(len(chunk)) or original(chunk))
    embed_file(
        text_file, tmp_path / "o.parquet", EmbedSettings(model=str(fixture_dir), chunk_size=2), output_format="parquet"
    )
    assert calls == [2, 2, 1]
