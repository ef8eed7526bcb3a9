"""`engines.spark.with_elmo` on Spark in local mode (2 cores, a failed task retried once): the pipe's and
`embed`'s vectors bit for bit, a task whose Python worker dies retried to the same output, bad rows handled
as the pipe handles them (and a NUL as `embed` does) and named by their place in the DataFrame, the result
written as Parquet and read back with pyarrow alone."""

import dataclasses
import os
import shutil
import sys

import numpy
import pytest

from engines.conftest import (
    BAD_ROWS,
    NUL_REFUSED,
    NUL_TEXT,
    TEXTS,
    assert_as_pipe_and_embed,
    assert_embed_refuses_nul,
    read_back,
    settings,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        shutil.which("java") is None and not os.environ.get("JAVA_HOME"),
        reason="Spark needs a Java runtime: no `java` on PATH and no JAVA_HOME",
    ),
]


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers import spacy_elmo from this environment
    session = (
        SparkSession.builder.master("local[2,2]")  # 2 cores; a task may fail once and is retried
        .appName("spacy-elmo tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    if before is None:
        del os.environ["PYSPARK_PYTHON"]
    else:
        os.environ["PYSPARK_PYTHON"] = before


def frame(spark, texts):
    return spark.createDataFrame(list(enumerate(texts)), "id long, text string")  # 2 partitions: local[2]


def test_a_dataframe_gets_the_pipes_and_embeds_vectors_bit_for_bit(spark, pipe_layers, embed_layers, tmp_path):
    from spacy_elmo.engines.spark import with_elmo

    texts = [*TEXTS, *BAD_ROWS.values()]
    embedded = with_elmo(frame(spark, texts), settings("all"), ship_model=True)  # the model copied to executors
    embedded.write.parquet(str(tmp_path / "out.parquet"))
    rows = read_back(tmp_path / "out.parquet", layers_first=True)
    assert_as_pipe_and_embed(rows, texts, pipe_layers, embed_layers)
    assert rows[len(TEXTS)][1].shape == (3, 0, 32) and rows[len(TEXTS) + 1][1].shape == (3, 50_000, 32)


def test_a_task_whose_worker_dies_is_retried_to_the_same_vectors(spark, pipe_layers, tmp_path, monkeypatch):
    from spacy_elmo.engines import spark as engine

    marker = tmp_path / "died"
    original = engine.embed_partition

    def dies_once(*arguments):
        if not marker.exists():
            marker.touch()
            os._exit(1)  # the Python worker process ends mid-task, as a killed one does
        yield from original(*arguments)

    monkeypatch.setattr(engine, "embed_partition", dies_once)  # what with_elmo hands the tasks
    embedded = engine.with_elmo(frame(spark, TEXTS[:40]), settings("top"))
    embedded.write.parquet(str(tmp_path / "out.parquet"))
    assert marker.exists(), "no task died"
    rows = read_back(tmp_path / "out.parquet", layers_first=False)
    assert sorted(rows) == list(range(40))
    for i, text in enumerate(TEXTS[:40]):
        assert numpy.array_equal(rows[i][1], pipe_layers[text][-1]), i


def test_a_null_text_is_refused_naming_the_column(spark):
    from spacy_elmo.engines.spark import with_elmo

    df = spark.createDataFrame([(0, "fine"), (1, None)], "id long, text string").coalesce(1)
    with pytest.raises(Exception, match=r"column 'text', row 1 of this batch: null, which cannot be embedded"):
        with_elmo(df, settings("top")).collect()
    with pytest.raises(ValueError, match=r"the DataFrame has no column 'body' \(columns: id, text\)"):
        with_elmo(df, settings("top"), text_column="body")
    with pytest.raises(ValueError, match=r"--dtype float16 is for HDF5 output; a Spark DataFrame stores float32"):
        with_elmo(df, dataclasses.replace(settings("top"), dtype="float16"))


def test_a_text_with_a_nul_is_refused_as_embed_refuses_it_naming_its_row(spark, tmp_path):
    """One partition: the partition's row is the DataFrame's, counted past the first slice of 8."""
    from spacy_elmo.engines.spark import with_elmo

    assert_embed_refuses_nul(tmp_path)
    texts = [*TEXTS[:30], NUL_TEXT, *TEXTS[30:40]]
    df = frame(spark, texts).coalesce(1)
    said = rf"row 6 of this batch: {NUL_REFUSED}.*; it is row 30 of partition 0 \(monotonically_increasing_id\(\) 30\);"
    with pytest.raises(Exception, match=said):
        with_elmo(df, settings("top"), batch_rows=8).collect()


def test_a_bad_row_past_the_first_batch_is_named_by_its_key_and_place(spark):
    """Row 73 of 100 in 2 partitions of 50, Arrow batches of 20 sliced to 8: it is partition 1's row 23 (its
    third batch's fourth row), which `monotonically_increasing_id()` selects again."""
    from pyspark.sql.functions import monotonically_increasing_id

    from spacy_elmo.engines.spark import with_elmo

    texts: list = list(TEXTS[:100])
    texts[73] = None
    df = frame(spark, texts)
    assert df.rdd.getNumPartitions() == 2
    place = (1 << 33) + 23
    said = rf"row 3 of this batch: null, .*; it is the row with id=73, row 23 of partition 1 \(\w+\(\) {place}\);"
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        with pytest.raises(Exception, match=said):
            with_elmo(df, settings("top"), batch_rows=8, key_column="id").collect()
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    assert df.withColumn("i", monotonically_increasing_id()).where(f"i = {place}").first()["id"] == 73
    with pytest.raises(ValueError, match=r"the DataFrame has no column 'key' \(columns: id, text\)"):
        with_elmo(df, settings("top"), key_column="key")


def test_an_onnx_graph_shipped_to_the_executors_gives_the_pipes_vectors(
    spark, pipe_layers, fixture_graph_file, tmp_path
):
    """An .onnx file on the driver's disk (the run's one export of the fixture), copied to the executors, run by
    ONNX Runtime there: the torch pipe's layers within ONNX Runtime's 1e-5."""
    from spacy_elmo.engines.spark import with_elmo

    graph = fixture_graph_file.path
    onnx_settings = dataclasses.replace(settings("all"), model=str(graph), runtime="onnxruntime")
    texts = TEXTS[:30]
    with_elmo(frame(spark, texts), onnx_settings, ship_model=True).write.parquet(str(tmp_path / "out.parquet"))
    rows = read_back(tmp_path / "out.parquet", layers_first=True)
    assert sorted(rows) == list(range(len(texts)))
    for i, text in enumerate(texts):
        numpy.testing.assert_allclose(rows[i][1], pipe_layers[text], rtol=0, atol=1e-5, err_msg=str(i))
