"""The "onnxruntime" runtime: the exported graph in `OnnxRunner`, on the CPU, in fp32, stateless and frozen,
with no torch where the model is an .onnx file."""

from typing import Callable, Optional, cast

from ..bilm.batching import SentenceRunner
from ..errors import SettingError, require
from ..onnx.runtime import LoadedGraph, OnnxRunner, load_graph
from . import Loaded, RunSettings


class OnnxRuntime:
    trainable = False
    # a fork of a process that has run torch's exporter or ONNX Runtime may inherit a lock some thread held, and hang
    spawn_workers = True

    def check(self, run: RunSettings) -> None:
        """What an exported graph cannot do, each refused naming its setting."""
        torch = "use runtime 'torch'"
        for wrong, setting, why in (
            (run.fine_tune, "fine_tune", f"true needs gradients, which an exported graph has none of; {torch}"),
            (
                run.stateful,
                "stateful",
                "true carries LSTM state between batches, and the exported graph starts every sentence from "
                f"zero; {torch} for stateful embedding",
            ),
            (
                run.precision != "fp32",
                "precision",
                f"{run.precision!r}: the exported graph runs in fp32; use precision 'fp32', or {torch} for "
                "bf16/int8/fp16",
            ),
            (run.device not in (None, "cpu"), "device", f"{run.device!r}: the exported graph runs on the CPU; {torch}"),
        ):
            if wrong:
                raise SettingError(why, setting)

    def load(self, path: str, sha256: Optional[str]) -> LoadedGraph:
        require("the 'onnxruntime' runtime", "onnxruntime", extra="onnx")  # else only the first batch would need it
        return load_graph(path, sha256)

    def runner(
        self, run: RunSettings, loaded: Optional[Loaded] = None, load: Optional[Callable[[], Loaded]] = None
    ) -> SentenceRunner:
        graph = cast(Optional[LoadedGraph], loaded)
        return OnnxRunner(
            None if graph is None else graph.graph,
            load=cast(Optional[Callable[[], LoadedGraph]], load),
            source="ONNX graph" if graph is None else graph.source,
            n_threads=run.n_threads,
            token_budget=run.token_budget,
        )

    def pin_threads(self, n_threads: int) -> None:
        """Nothing: each session is given its threads."""
