"""The runtimes the biLM runs with, one registry for the layer (`BiLM.v1`) and `embed` alike: each checks its
limits on the run settings, loads a model and builds the runner they run. A new runtime is one module and
one line in `RUNTIMES`. Nothing here imports torch, so a serving install without it runs "onnxruntime".
"""

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol

from ..bilm.batching import SentenceRunner
from ..bilm.options import BiLMOptions
from ..errors import SettingError


def check_integer(setting: str, value: Any, least: int, meaning: str = "") -> None:
    """Refuse anything but an integer >= `least` (`meaning`: what a value means, if needed)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SettingError(f"must be an integer >= {least}{meaning}, got {value!r}", setting)


@dataclass(frozen=True)
class RunSettings:
    """How the biLM runs, checked once when made, the runtime's own limits included; each refusal is a
    `SettingError` of the setting's field name, which the caller names as its users know it
    (`errors.named_settings`: "--threads", "spacy-elmo.BiLM.v1 n_threads")."""

    runtime: str = "torch"
    device: Optional[str] = None  # None: thinc's current device (the layer's)
    precision: str = "fp32"
    n_threads: int = 0  # 0: the runtime's own setting
    token_budget: int = 0  # 0: the device's default
    stateful: bool = False
    fine_tune: bool = False
    token_cache_size: Optional[int] = None

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise SettingError(f"must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}", "runtime")
        check_integer("n_threads", self.n_threads, 0, " (0 = the runtime's own setting)")
        check_integer("token_budget", self.token_budget, 0, " (0 = the device's default)")
        RUNTIMES[self.runtime].check(self)


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
        """Refuse what this runtime cannot do (a `SettingError` of the setting it is about)."""

    def load(self, path: str, sha256: Optional[str]) -> Loaded:
        """The model at `path`, its `sha256` pin checked (refusals are about settings `path` and `sha256`)."""

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
