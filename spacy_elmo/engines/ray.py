"""ELMo columns on a Ray Data Dataset: `map_batches` with `ArrowEmbedder` over an actor pool, each actor
loading the model once. Ray restarts an actor that dies and runs its batch again, to the same vectors (the
biLM is batch-independent).
"""

from typing import Any, Optional

from ..embed.arrow import ArrowEmbedder
from ..embed.columns import check_table_dtype
from ..embed.output import EmbedSettings


def with_elmo(
    ds: Any,
    settings: EmbedSettings,
    text_column: str = "text",
    tokens_column: Optional[str] = None,
    workers: int = 1,
    threads: int = 1,
    num_gpus: float = 0,
    batch_rows: int = 256,
    embedder: type = ArrowEmbedder,
) -> Any:
    """`ds` with `tokens` (texts only) and `elmo` added, as `embed` computes them, by `workers` actors.
    `settings.model` must be readable where the actors run (a shipped model's name, or a path every node
    sees); `embedder`: the class the actors run (a subclass, to add to it)."""
    check_table_dtype(settings.dtype, "a Ray Dataset")
    on_gpu = settings.device.split(":")[0] == "cuda"
    if bool(num_gpus) != on_gpu:
        raise ValueError(
            f"num_gpus={num_gpus} with device {settings.device!r}: give each actor a GPU (num_gpus=1) with device "
            "'cuda', and none with 'cpu'"
        )
    return ds.map_batches(
        embedder,
        fn_constructor_kwargs={
            "settings": settings,
            "text_column": text_column,
            "tokens_column": tokens_column,
            "threads": threads,
        },
        batch_format="pyarrow",
        batch_size=batch_rows,
        concurrency=workers,
        num_cpus=threads,
        num_gpus=num_gpus or None,
    )
