"""ELMo columns on a Spark DataFrame: `with_elmo(df, settings)`.

`mapInArrow` rather than a pandas UDF: the vectors go from numpy to Spark without a pandas column of arrays
in between, and the model is loaded once a Python worker, not once a batch. A task Spark retries embeds its
rows again, to the same vectors (the biLM is batch-independent).
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
) -> Any:
    """`df` with `tokens` (texts only) and `elmo` added, as `embed` computes them (as plain arrays: Spark has
    no fixed-size ones). `settings.model` is read by each executor: a shipped model's name, a path every
    executor sees, or, with `ship_model`, a local file or directory that Spark copies to them."""
    from pyspark.sql.types import ArrayType, FloatType, StringType, StructField, StructType

    check_table_dtype(settings.dtype, "a Spark DataFrame")
    column = tokens_column if tokens_column is not None else text_column
    if column not in df.columns:
        raise ValueError(f"the DataFrame has no column {column!r} (columns: {', '.join(df.columns)})")
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
    task = functools.partial(embed_partition, settings, text_column, tokens_column, threads, model_file, batch_rows)
    return df.mapInArrow(task, StructType([*df.schema.fields, *added]))


def embed_partition(
    settings: EmbedSettings,
    text_column: str,
    tokens_column: Optional[str],
    threads: int,
    model_file: Optional[str],
    batch_rows: int,
    batches: Iterator[Any],
) -> Iterator[Any]:
    """What each Spark task runs: its partition's Arrow batches in, with the ELMo columns, out."""
    key = (repr(settings), text_column, tokens_column, threads, model_file)
    embedder = _embedders.get(key)
    if embedder is None:
        if model_file is not None:
            from pyspark import SparkFiles

            settings = replace(settings, model=SparkFiles.get(model_file))
        embedder = _embedders[key] = ArrowEmbedder(settings, text_column, tokens_column, threads=threads)
    for batch in batches:
        for start in range(0, batch.num_rows, batch_rows):
            yield plain_lists(embedder(batch.slice(start, batch_rows)))


def plain_lists(batch: Any) -> Any:
    """The `elmo` column's fixed-size lists as Spark's arrays (variable lists of the same values)."""
    import pyarrow

    index = batch.schema.get_field_index(VECTORS)
    vectors = batch.column(index)
    plain: Any = pyarrow.list_(pyarrow.float32())
    for _ in range(2 if pyarrow.types.is_fixed_size_list(vectors.type) else 1):
        plain = pyarrow.list_(plain)
    return batch.set_column(index, VECTORS, vectors.cast(plain))
