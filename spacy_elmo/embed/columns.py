"""The table layout of embedded texts, one row a text, shared by `embed --format parquet` and the engines.

Two columns are added to a row: `tokens` (list<string>: the tokens embedded) and `elmo` (float32):

- `--layers top` or `average`: list<fixed_size_list<float32, D>>: one D-vector a token, shape (n, D);
- `--layers all`: fixed_size_list<list<fixed_size_list<float32, D>>, L>: shape (L, n, D), layer first.

Each row's values are in the order of the HDF5 output's dataset for that text (row-major over the shape),
so any Arrow or Parquet reader gets the same float32 values without this package (`column_arrays` shows how).
"""

from collections.abc import Sequence
from typing import Any

import numpy

TOKENS = "tokens"
VECTORS = "elmo"
LINE = "line"  # `embed --format parquet`: the input line (or JSONL record) each row is


def check_table_dtype(dtype: str, what: str) -> None:
    """Tables hold float32: Spark has no 16-bit float, and one type keeps every reader's code the same."""
    if dtype != "float32":
        raise ValueError(f"--dtype {dtype} is for HDF5 output; {what} stores float32 vectors (use --dtype float32)")


def tokens_array(tokenized: Sequence[Sequence[str]]) -> Any:
    import pyarrow

    return pyarrow.array([list(tokens) for tokens in tokenized], type=pyarrow.list_(pyarrow.string()))


def vectors_array(arrays: Sequence[numpy.ndarray], all_layers: bool, n_layers: int, width: int) -> Any:
    """The `elmo` column of `arrays` ((L, n, D) each with `all_layers`, else (n, D)), their bytes as they are."""
    import pyarrow

    flat = [numpy.ascontiguousarray(a, dtype=numpy.float32).reshape(-1) for a in arrays]
    values = numpy.concatenate(flat) if flat else numpy.zeros(0, dtype=numpy.float32)
    vectors = pyarrow.FixedSizeListArray.from_arrays(pyarrow.array(values), width)
    # one list of vectors a text, or a text and layer: its tokens
    counts = [a.shape[-2] for a in arrays for _ in range(n_layers if all_layers else 1)]
    offsets = numpy.concatenate([[0], numpy.cumsum(counts, dtype=numpy.int64)]).astype(numpy.int32)
    lists = pyarrow.ListArray.from_arrays(pyarrow.array(offsets), vectors)
    if not all_layers:
        return lists
    return pyarrow.FixedSizeListArray.from_arrays(lists, n_layers)


def vectors_type(all_layers: bool, n_layers: int, width: int) -> Any:
    import pyarrow

    lists = pyarrow.list_(pyarrow.list_(pyarrow.float32(), width))
    return pyarrow.list_(lists, n_layers) if all_layers else lists


def column_arrays(column: Any) -> list[numpy.ndarray]:
    """An `elmo` column -> a float32 array a row: the reading a user does with pyarrow and numpy alone."""
    import pyarrow

    chunks = column.chunks if isinstance(column, pyarrow.ChunkedArray) else [column]
    out: list[numpy.ndarray] = []
    for chunk in chunks:
        all_layers = pyarrow.types.is_fixed_size_list(chunk.type)
        n_layers = chunk.type.list_size if all_layers else 1
        lists = chunk.flatten() if all_layers else chunk  # one list of vectors a (text, layer)
        counts = lists.value_lengths().to_numpy(zero_copy_only=False)
        vectors = lists.flatten()
        width = vectors.type.list_size
        values = vectors.flatten().to_numpy(zero_copy_only=False)
        ends = numpy.cumsum(counts.reshape(-1, n_layers).sum(axis=1) * width)
        for row, (start, end) in enumerate(zip(numpy.concatenate([[0], ends[:-1]]), ends)):
            n = int(counts[row * n_layers])
            shape = (n_layers, n, width) if all_layers else (n, width)
            out.append(values[start:end].reshape(shape))
    return out
