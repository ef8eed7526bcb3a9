"""ELMo columns on a Ray Data Dataset: `map_batches` with `ArrowEmbedder` over an actor pool, each actor
loading the model once. Ray restarts an actor that dies and runs its batch again, to the same vectors (the
biLM is batch-independent).

The pool never holds the CPUs that the tasks feeding it (reading, the maps before it) need: a fixed pool's
actors start first and keep their CPUs for the whole job, so actors asking for every CPU of the cluster leave
the read task waiting for them, and them for it, forever. `reserve_cpus` are kept free of actors (`pool_size`).

A bad row (a null, a NUL) is named by `key_column`: a Ray Data batch does not say where in the Dataset it is,
and a global row number would need every block counted first.
"""

import math
import warnings
from typing import Any, NamedTuple, Optional

from ..embed.arrow import ArrowEmbedder
from ..embed.columns import check_table_dtype
from ..embed.output import EmbedSettings, check_integer
from ..embed.store import EmbedWarning


class Pool(NamedTuple):
    """The actors a job starts and the CPUs each asks Ray for (it runs `threads` threads whatever it asks)."""

    actors: int
    cpus_each: float


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
    key_column: Optional[str] = None,
    reserve_cpus: int = 1,
) -> Any:
    """`ds` with `tokens` (texts only) and `elmo` added, as `embed` computes them, by `workers` actors.
    `settings.model` must be readable where the actors run (a shipped model's name, or a path every node
    sees); `embedder`: the class the actors run (a subclass, to add to it); `key_column`: a column (an id)
    that names a bad row in the error. The actors leave `reserve_cpus` of the cluster's CPUs (1: a read task's)
    to the tasks that feed them: fewer actors, or fewer CPUs asked each, than `workers` x `threads` when the
    cluster is too small, with an `EmbedWarning` saying so (0: no reserve, for a Dataset already in memory)."""
    check_table_dtype(settings.dtype, "a Ray Dataset")
    for setting, value, least in (("workers", workers, 1), ("threads", threads, 1), ("reserve_cpus", reserve_cpus, 0)):
        check_integer(setting, value, least)
    on_gpu = settings.device.split(":")[0] == "cuda"
    if bool(num_gpus) != on_gpu:
        raise ValueError(
            f"num_gpus={num_gpus} with device {settings.device!r}: give each actor a GPU (num_gpus=1) with device "
            "'cuda', and none with 'cpu'"
        )
    cpus, nodes = cluster_cpus(ds)
    pool = pool_size(workers, threads, reserve_cpus, cpus, nodes)
    if pool != (workers, threads):
        warnings.warn(
            f"Ray: {workers} actor(s) of {threads} CPU(s) would leave fewer than reserve_cpus={reserve_cpus} of "
            f"the cluster's {cpus:g} CPUs to the tasks that feed them, which would wait for the actors forever; "
            f"starting {pool.actors} actor(s), each asking Ray for {pool.cpus_each:g} CPU(s) (and running "
            f"{threads} thread(s))",
            EmbedWarning,
            stacklevel=2,
        )
    kwargs: dict[str, Any] = {
        "settings": settings,
        "text_column": text_column,
        "tokens_column": tokens_column,
        "threads": threads,
    }
    if key_column is not None:  # only then: a subclass written before key_column still starts
        kwargs["key_column"] = key_column
    from ray.data import ActorPoolStrategy

    return ds.map_batches(
        embedder,
        fn_constructor_kwargs=kwargs,
        batch_format="pyarrow",
        batch_size=batch_rows,
        compute=ActorPoolStrategy(size=pool.actors),  # `concurrency=` is deprecated since Ray 2.51
        num_cpus=pool.cpus_each,
        num_gpus=num_gpus or None,
    )


def cluster_cpus(ds: Any) -> tuple[float, int]:
    """(the CPUs Ray Data may use for `ds`, the nodes that have CPUs): the cluster's now, within the Dataset's
    `resource_limits`. Starts Ray as running the Dataset would, when nothing has yet."""
    import ray

    if not ray.is_initialized():
        ray.init()
    found = [node["Resources"].get("CPU", 0) for node in ray.nodes() if node.get("Alive")]
    cpus = float(sum(found))
    context = getattr(ds, "context", None)
    limit = getattr(getattr(getattr(context, "execution_options", None), "resource_limits", None), "cpu", None)
    if limit is not None and limit < cpus:
        cpus = float(limit)
    return cpus, sum(1 for n in found if n > 0)


def pool_size(workers: int, threads: int, reserve: int, cpus: float, nodes: int) -> Pool:
    """The pool that leaves `reserve` of `cpus` free. On one node, `workers` actors each asking an equal share
    of what is left (they run `threads` threads anyway: a CPU is Ray's bookkeeping, not a cap). Across nodes a
    share could leave a fraction of a CPU free on each and none whole, so whole CPUs: as many `threads`-CPU
    actors as fit (at least one). No CPUs yet (an autoscaling cluster): as asked, the autoscaler adds them."""
    left = cpus - reserve
    if cpus <= 0 or workers * threads <= left:
        return Pool(workers, threads)
    if nodes <= 1:  # Ray counts a resource in 1/10000ths: rounded down, the shares never exceed what is left
        return Pool(workers, math.floor(max(left, 0) / workers * 10_000) / 10_000)
    actors = max(math.floor(left / threads), 1)
    return Pool(actors, threads if actors * threads <= left else max(left, 0))
