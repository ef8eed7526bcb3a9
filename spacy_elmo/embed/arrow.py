"""Arrow batches of texts in, the same batches with their ELMo vectors (`columns.py`) out: what the table
engines run on their workers, with `embed`'s `Embedder`, so a text has the same vectors bit for bit as in
the pipe and in `embed`'s output. The model is loaded once a worker, when the embedder is built.
"""

from collections.abc import Sequence
from typing import Any, Optional

from .columns import TOKENS, VECTORS, check_table_dtype, tokens_array, vectors_array, vectors_type
from .output import Embedder, EmbedSettings


class ArrowEmbedder(Embedder):
    """Callable on a `pyarrow.RecordBatch` or `Table` holding texts in `text_column` or, with `tokens_column`,
    tokens; returns it with `tokens` (texts only) and `elmo` added."""

    def __init__(
        self,
        settings: EmbedSettings,
        text_column: str = "text",
        tokens_column: Optional[str] = None,
        threads: Optional[int] = None,
    ) -> None:
        check_table_dtype(settings.dtype, "an Arrow table")
        self.column = tokens_column if tokens_column is not None else text_column
        self.pretokenized = tokens_column is not None
        super().__init__(settings, threads)

    def output_columns(self) -> list[tuple[str, Any]]:
        """The (name, Arrow type) of each column added."""
        import pyarrow

        added = [] if self.pretokenized else [(TOKENS, pyarrow.list_(pyarrow.string()))]
        return [*added, (VECTORS, vectors_type(*self.shape))]

    def __call__(self, batch: Any) -> Any:
        for name, _ in self.output_columns():
            if name in batch.schema.names:
                raise ValueError(f"the input already has a column {name!r}, which the embedder adds; rename it first")
        tokenized = self._tokens(batch)
        arrays = self.embed(tokenized) if tokenized else []
        out = batch if self.pretokenized else batch.append_column(TOKENS, tokens_array(tokenized))
        return out.append_column(VECTORS, vectors_array(arrays, *self.shape))

    def _tokens(self, batch: Any) -> list[Sequence[str]]:
        """Each row's tokens; a null or a non-string is refused, as the pipe refuses it."""
        import pyarrow

        if self.column not in batch.schema.names:
            raise ValueError(f"the input has no column {self.column!r} (columns: {', '.join(batch.schema.names)})")
        values = batch.column(self.column)
        is_list = pyarrow.types.is_list(values.type) or pyarrow.types.is_large_list(values.type)
        kind = values.type.value_type if is_list else values.type
        if is_list != self.pretokenized or not (pyarrow.types.is_string(kind) or pyarrow.types.is_large_string(kind)):
            want = "lists of strings (tokens)" if self.pretokenized else "strings"
            raise ValueError(f"column {self.column!r} holds {values.type}, not {want}")
        rows = values.to_pylist()
        for index, row in enumerate(rows):
            if row is None or (self.pretokenized and any(token is None for token in row)):
                raise ValueError(
                    f"column {self.column!r}, row {index} of this batch: null, which cannot be embedded (the pipe "
                    "takes strings only); drop or fill the nulls first"
                )
        if self.pretokenized:
            return rows
        return [self.tokenize(text) for text in rows]
