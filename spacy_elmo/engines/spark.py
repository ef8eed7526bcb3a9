"""ELMo columns on a Spark DataFrame: `with_elmo(df, settings)`.

`mapInArrow` rather than a pandas UDF: the vectors go from numpy to Spark without a pandas column of arrays
in between, and the model is loaded once a Python worker, not once a batch. A task Spark retries embeds its
rows again, to the same vectors (the biLM is batch-independent).

A bad row (a null, a NUL) fails the job naming it by `key_column`, when given, and by its place in the
DataFrame's order: its partition and its row there (counted across the partition's Arrow batches). That is
free; a contiguous row number is not: `zipWithIndex` or `row_number()` cost a pass over the input (or a
single-partition window) before any row is embedded, for an error most jobs never raise.
"""

import functools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from ..embed.arrow import ArrowEmbedder
from ..embed.columns import TOKENS, VECTORS, check_table_dtype
from ..embed.output import EmbedSettings

# the embedders this Python worker has built, by what they were built from: one model load a worker
_embedders: dict[tuple, ArrowEmbedder] = {}


def with_elmo(
    df: Any,
    settings: EmbedSettings,
    text_column: str = "text",
    tokens_column: Optional[str] = None,
    ship_model: bool = False,
    threads: int = 1,
    batch_rows: int = 256,
    key_column: Optional[str] = None,
) -> Any:
    """`df` with `tokens` (texts only) and `elmo` added, as `embed` computes them (as plain arrays: Spark has
    no fixed-size ones). `settings.model` is read by each executor: a shipped model's name, a path every
    executor sees, or, with `ship_model`, a local file or directory that Spark copies to them. `key_column`:
    a column (an id) that names a bad row in the error, beside its partition and row there."""
    from pyspark.sql.types import ArrayType, FloatType, StringType, StructField, StructType

    check_table_dtype(settings.dtype, "a Spark DataFrame")
    column = tokens_column if tokens_column is not None else text_column
    for name in (column, key_column):
        if name is not None and name not in df.columns:
            raise ValueError(f"the DataFrame has no column {name!r} (columns: {', '.join(df.columns)})")
    vectors: Any = ArrayType(ArrayType(FloatType()))
    if settings.layers == "all":
        vectors = ArrayType(vectors)
    added = [StructField(VECTORS, vectors)]
    if tokens_column is None:
        added.insert(0, StructField(TOKENS, ArrayType(StringType())))
    for field in added:
        if field.name in df.columns:
            raise ValueError(f"the DataFrame already has a column {field.name!r}, which with_elmo adds; rename it")
    model_file = None
    if ship_model:
        path = Path(settings.model)
        if not path.exists():
            raise FileNotFoundError(f"ship_model: {settings.model} is not a local file or directory to ship")
        df.sparkSession.sparkContext.addFile(str(path.resolve()), recursive=path.is_dir())
        model_file = path.resolve().name
    task = functools.partial(
        embed_partition, settings, text_column, tokens_column, threads, model_file, batch_rows, key_column
    )
    return df.mapInArrow(task, StructType([*df.schema.fields, *added]))


def embed_partition(
    settings: EmbedSettings,
    text_column: str,
    tokens_column: Optional[str],
    threads: int,
    model_file: Optional[str],
    batch_rows: int,
    key_column: Optional[str],
    batches: Iterator[Any],
) -> Iterator[Any]:
    """What each Spark task runs: its partition's Arrow batches in, with the ELMo columns, out."""
    from pyspark import TaskContext

    key = (repr(settings), text_column, tokens_column, threads, model_file, key_column)
    embedder = _embedders.get(key)
    if embedder is None:
        if model_file is not None:
            from pyspark import SparkFiles

            settings = replace(settings, model=SparkFiles.get(model_file))
        embedder = _embedders[key] = ArrowEmbedder(
            settings, text_column, tokens_column, threads=threads, key_column=key_column
        )
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    first = 0  # the partition's row that starts the slice
    for batch in batches:
        for start in range(0, batch.num_rows, batch_rows):
            place = functools.partial(partition_place, partition, first)
            yield plain_lists(embedder(batch.slice(start, batch_rows), place))
            first += min(batch_rows, batch.num_rows - start)


def partition_place(partition: int, first: int, index: int) -> str:
    """Where row `index` of a slice that starts at the partition's row `first` is in the DataFrame, and
    `monotonically_increasing_id()` there (the partition in its upper 31 bits): it selects the row again in
    the DataFrame given to `with_elmo`, whose partitions are the tasks' (when the plan is deterministic)."""
    row = first + index
    return f"row {row} of partition {partition} (monotonically_increasing_id() {(partition << 33) + row})"


def plain_lists(batch: Any) -> Any:
    """The `elmo` column's fixed-size lists as Spark's arrays (variable lists of the same values)."""
    import pyarrow

    index = batch.schema.get_field_index(VECTORS)
    vectors = batch.column(index)
    plain: Any = pyarrow.list_(pyarrow.float32())
    for _ in range(2 if pyarrow.types.is_fixed_size_list(vectors.type) else 1):
        plain = pyarrow.list_(plain)
    return batch.set_column(index, VECTORS, vectors.cast(plain))
