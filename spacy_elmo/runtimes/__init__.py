"""The runtimes the biLM runs with, one registry for the layer (`BiLM.v1`) and `embed` alike: each checks its
limits on the run settings, loads a model and builds the runner they run. A new runtime is one module and
one line in `RUNTIMES`. Nothing here imports torch, so a serving install without it runs "onnxruntime".
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from ..bilm.batching import SentenceRunner
from ..bilm.options import BiLMOptions


def check_integer(option: str, value: Any, least: int, meaning: str = "") -> None:
    """Refuse, naming `option`, anything but an integer >= `least` (`meaning`: what a value means, if needed)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{option} must be an integer >= {least}{meaning}, got {value!r}")


@dataclass(frozen=True)
class RunSettings:
    """How the biLM runs, checked once when made, the runtime's own limits included; `names`: how the caller
    names each setting in errors ("--threads", "spacy-elmo.BiLM.v1 n_threads")."""

    runtime: str = "torch"
    device: Optional[str] = None  # None: thinc's current device (the layer's)
    precision: str = "fp32"
    n_threads: int = 0  # 0: the runtime's own setting
    token_budget: int = 0  # 0: the device's default
    stateful: bool = False
    fine_tune: bool = False
    token_cache_size: Optional[int] = None
    names: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(f"{self.name('runtime')} must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
        check_integer(self.name("n_threads"), self.n_threads, 0, " (0 = the runtime's own setting)")
        if isinstance(self.token_budget, bool) or not isinstance(self.token_budget, int) or self.token_budget < 0:
            raise ValueError(
                f"{self.name('token_budget')} must be an integer >= 1, or 0 for the device's default, "
                f"got {self.token_budget!r}"
            )
        RUNTIMES[self.runtime].check(self)

    def name(self, setting: str) -> str:
        return self.names.get(setting, setting)


class Loaded(Protocol):
    """A model as its runtime loaded it, read by that runtime's runner; `options` and `describe()` (what an
    output records of it) for `embed`."""

    @property
    def options(self) -> BiLMOptions: ...

    def describe(self) -> dict[str, Any]: ...


class Runtime(Protocol):
    """trainable: its runner is a torch module, which the layer runs in thinc's PyTorch shim (else a frozen
    graph); spawn_workers: `embed`'s workers are spawned and given the loaded model (else forked, each
    loading it)."""

    trainable: bool
    spawn_workers: bool

    def check(self, run: RunSettings) -> None:
        """Refuse, naming the setting as `run.names` does, what this runtime cannot do."""

    def load(self, path: str, sha256: Optional[str], option: str, sha256_option: str) -> Loaded:
        """The model at `path`, its `sha256` pin checked; `option`, `sha256_option` name both in errors."""

    def runner(
        self, run: RunSettings, loaded: Optional[Loaded] = None, load: Optional[Callable[[], Loaded]] = None
    ) -> SentenceRunner:
        """The runner of `loaded`, or of what `load` (picklable) returns on first use."""

    def pin_threads(self, n_threads: int) -> None:
        """Set this process's threads before a model is loaded (a worker process)."""


def _registry() -> dict[str, Runtime]:
    from .onnx import OnnxRuntime
    from .torch import TorchRuntime

    return {"torch": TorchRuntime(), "onnxruntime": OnnxRuntime()}


RUNTIMES = _registry()  # what the layer and `embed` run the biLM with, by name
