"""Arrow batches of texts in, the same batches with their ELMo vectors (`columns.py`) out: what the table
engines run on their workers, with `embed`'s `Embedder`, so a text has the same vectors bit for bit as in
the pipe and in `embed`'s output. The model is loaded once a worker, when the embedder is built.

A row is refused where the pipe or `embed` would refuse it: a null (the pipe takes strings only) or a NUL
(`text.NUL`, which `embed` refuses in its input, in the same words). A batch does not know where it is in
the engine's dataset, so an error names the row by the `key_column` the user names, and by the `place` the
engine knows (Spark: the partition's row).
"""

from collections.abc import Sequence
from typing import Any, Callable, Optional

from ..text import NUL, NUL_RULE
from .columns import TOKENS, VECTORS, check_table_dtype, tokens_array, vectors_array, vectors_type
from .output import Embedder, EmbedSettings

# row i of a batch -> where the engine has it (e.g. "row 1027 of partition 3"), for a bad row's error
Place = Callable[[int], str]
_KEY_CHARS = 80  # of a key value's repr in an error


class ArrowEmbedder(Embedder):
    """Callable on a `pyarrow.RecordBatch` or `Table` holding texts in `text_column` or, with `tokens_column`,
    tokens; returns it with `tokens` (texts only) and `elmo` added. `key_column`: a column that names a row
    (an id) in the error about a bad row."""

    def __init__(
        self,
        settings: EmbedSettings,
        text_column: str = "text",
        tokens_column: Optional[str] = None,
        threads: Optional[int] = None,
        key_column: Optional[str] = None,
    ) -> None:
        check_table_dtype(settings.dtype, "an Arrow table")
        self.column = tokens_column if tokens_column is not None else text_column
        self.pretokenized = tokens_column is not None
        self.key_column = key_column
        super().__init__(settings, threads)

    def output_columns(self) -> list[tuple[str, Any]]:
        """The (name, Arrow type) of each column added."""
        import pyarrow

        added = [] if self.pretokenized else [(TOKENS, pyarrow.list_(pyarrow.string()))]
        return [*added, (VECTORS, vectors_type(*self.shape))]

    def __call__(self, batch: Any, place: Optional[Place] = None) -> Any:
        """`place`: where row i of `batch` is in the engine's dataset, for errors."""
        for name, _ in self.output_columns():
            if name in batch.schema.names:
                raise ValueError(f"the input already has a column {name!r}, which the embedder adds; rename it first")
        tokenized = self._tokens(batch, place)
        arrays = self.embed(tokenized) if tokenized else []
        out = batch if self.pretokenized else batch.append_column(TOKENS, tokens_array(tokenized))
        return out.append_column(VECTORS, vectors_array(arrays, *self.shape))

    def _tokens(self, batch: Any, place: Optional[Place] = None) -> list[Sequence[str]]:
        """Each row's tokens; a null or a non-string is refused, as the pipe refuses it, and a NUL, as `embed`
        refuses it."""
        import pyarrow

        for column in (self.column, self.key_column):
            if column is not None and column not in batch.schema.names:
                raise ValueError(f"the input has no column {column!r} (columns: {', '.join(batch.schema.names)})")
        values = batch.column(self.column)
        is_list = pyarrow.types.is_list(values.type) or pyarrow.types.is_large_list(values.type)
        kind = values.type.value_type if is_list else values.type
        if is_list != self.pretokenized or not (pyarrow.types.is_string(kind) or pyarrow.types.is_large_string(kind)):
            want = "lists of strings (tokens)" if self.pretokenized else "strings"
            raise ValueError(f"column {self.column!r} holds {values.type}, not {want}")
        rows = values.to_pylist()
        for index, row in enumerate(rows):
            if row is None or (self.pretokenized and any(token is None for token in row)):
                raise self._bad_row(
                    batch,
                    index,
                    place,
                    "null, which cannot be embedded (the pipe takes strings only)",
                    "drop or fill the nulls first",
                )
            strings = row if self.pretokenized else [row]
            nul = next((i for i, string in enumerate(strings) if NUL in string), None)
            if nul is not None:
                which = f"token {nul} holds " if self.pretokenized else ""
                raise self._bad_row(
                    batch,
                    index,
                    place,
                    f"{which}{NUL_RULE} (embed refuses it in its input too)",
                    "UTF-16 or UTF-32 text read as UTF-8 holds NULs: decode it right, or drop the row",
                )
        if self.pretokenized:
            return rows
        return [self.tokenize(text) for text in rows]

    def _bad_row(self, batch: Any, index: int, place: Optional[Place], what: str, advice: str) -> ValueError:
        """Row `index` of `batch` is `what`: named by its key and its place in the dataset where known."""
        where = []
        if self.key_column is not None:
            key = repr(batch.column(self.key_column)[index].as_py())
            key = key if len(key) <= _KEY_CHARS else f"{key[: _KEY_CHARS - 3]}..."
            where.append(f"the row with {self.key_column}={key}")
        if place is not None:
            where.append(place(index))
        row = f"column {self.column!r}, row {index} of this batch: {what}"
        if not where:  # an engine's batch (Ray's) does not know its place: only a key can name the row
            return ValueError(
                f"{row}; {advice} (a batch does not say which rows of the dataset it holds: name a key_column, such "
                "as an id, to have the row named by it)"
            )
        return ValueError(f"{row}; it is {', '.join(where)}; {advice}")
