"""Arrow batches of texts in, the same batches with their ELMo vectors out: the one function the table
engines (Spark, Ray Data) run on their workers.

`ArrowEmbedder` loads the model once, when it is built (once a worker: a Spark Python worker keeps it, a Ray
actor is one), and embeds each batch with `embed`'s tokenizer, runner, batching and windows
(`output.embed_words`), so a text has the same vectors bit for bit as in the pipe and in `embed`'s output.
The columns it adds are those of `columns.py`. With the onnxruntime runtime and an .onnx model, no torch.
"""

from collections.abc import Sequence
from typing import Any, Optional

from .columns import TOKENS, VECTORS, check_table_dtype, tokens_array, vectors_array, vectors_type
from .output import (
    EmbedModel,
    EmbedSettings,
    embed_words,
    load_embed_model,
    make_runner,
    make_tokenize,
    model_shape,
    set_worker_threads,
)


class ArrowEmbedder:
    """Callable on a `pyarrow.RecordBatch` or `Table` holding texts in `text_column` (strings) or, with
    `tokens_column`, tokens (lists of strings); returns it with `tokens` (texts only) and `elmo` added.
    `threads`: torch threads for this worker process (None: the settings' `n_threads`)."""

    def __init__(
        self,
        settings: EmbedSettings,
        text_column: str = "text",
        tokens_column: Optional[str] = None,
        threads: Optional[int] = None,
        model: Optional[EmbedModel] = None,
    ) -> None:
        check_table_dtype(settings.dtype, "an Arrow table")
        self.settings = settings
        self.column = tokens_column if tokens_column is not None else text_column
        self.pretokenized = tokens_column is not None
        self.tokenize = make_tokenize(settings)
        set_worker_threads(settings, threads)
        model = load_embed_model(settings) if model is None else model
        self.all_layers, self.n_layers, self.width = model_shape(settings, model)
        self.runner = make_runner(settings, model, threads)

    def output_columns(self) -> list[tuple[str, Any]]:
        """The (name, Arrow type) of each column added."""
        import pyarrow

        added = [] if self.pretokenized else [(TOKENS, pyarrow.list_(pyarrow.string()))]
        return [*added, (VECTORS, vectors_type(self.all_layers, self.n_layers, self.width))]

    def __call__(self, batch: Any) -> Any:
        for name, _ in self.output_columns():
            if name in batch.schema.names:
                raise ValueError(f"the input already has a column {name!r}, which the embedder adds; rename it first")
        tokenized = self._tokens(batch)
        arrays = embed_words(self.runner, self.settings, tokenized) if tokenized else []
        out = batch if self.pretokenized else batch.append_column(TOKENS, tokens_array(tokenized))
        return out.append_column(VECTORS, vectors_array(arrays, self.all_layers, self.n_layers, self.width))

    def _tokens(self, batch: Any) -> list[Sequence[str]]:
        """Each row's tokens; a null, a non-string or a missing column is refused, naming it, as the pipe
        refuses a text that is not a string."""
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
