"""CUDA graphs of a function at fixed input shapes: captured once, then each call at those shapes is one launch.

Why: the LSTM's recurrent loop launches a dozen small kernels a step, and on a GPU launching them costs more
than their work. A graph replays the whole loop from one launch. A shape seen once runs as it is; the second
call with it captures; at most `max_graphs` graphs are kept (each holds its own memory), the least recently
used dropped first. A capture that fails turns graphs off for the cache, with a warning, and the function
runs as it is: graphs are a speed-up, never a requirement.
"""

import warnings
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Callable

import torch

# The most shapes remembered as seen once (a stream of ever-new shapes must not grow the cache without bound).
MAX_SEEN = 4096


@dataclass
class CapturedGraph:
    graph: "torch.cuda.CUDAGraph"
    inputs: tuple[torch.Tensor, ...]  # the graph reads these: a call copies its inputs in
    outputs: Any  # the graph writes these: valid until the next call of the cache


class GraphCache:
    """`cache(key, function, inputs)`: `function(*inputs)`, through a CUDA graph once `key` (which must
    determine every input's shape and dtype, and the function) has been seen before. The outputs of a graphed
    call are the graph's own tensors: use or copy them before the next call."""

    def __init__(self, max_graphs: int = 4) -> None:
        self.max_graphs = max_graphs
        self.enabled = True
        self.n_captures = 0
        self._graphs: OrderedDict[Hashable, CapturedGraph] = OrderedDict()
        self._seen: set[Hashable] = set()

    def clear(self) -> None:
        self._graphs.clear()
        self._seen.clear()

    def __call__(self, key: Hashable, function: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> Any:
        if not self.enabled or not inputs[0].is_cuda:
            return function(*inputs)
        captured = self._graphs.get(key)
        if captured is None:
            if key not in self._seen:
                if len(self._seen) >= MAX_SEEN:  # shapes that never came back: forget them
                    self._seen.clear()
                self._seen.add(key)
                return function(*inputs)
            try:
                captured = self._capture(function, inputs)
            except Exception as error:  # a speed-up that failed: say so once, run without it
                self.enabled = False
                self.clear()
                warnings.warn(f"CUDA graph capture failed, running without graphs: {error}", stacklevel=2)
                return function(*inputs)
            self._graphs[key] = captured
            while len(self._graphs) > self.max_graphs:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(key)
        for static, given in zip(captured.inputs, inputs):
            static.copy_(given)
        captured.graph.replay()
        return captured.outputs

    def _capture(self, function: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> CapturedGraph:
        static = tuple(x.clone() for x in inputs)
        with torch.cuda.device(static[0].device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture: per-stream handles, lazy initialisation
                function(*static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = function(*static)
        self.n_captures += 1
        return CapturedGraph(graph, static, outputs)
