"""The "torch" runtime: the PyTorch biLM in `BiLMRunner`, on any device and precision, trainable. torch is
imported only when this runtime is used, so that a serving install without it can import the registry."""

import functools
from collections.abc import Mapping
from typing import Any, Callable, Optional, cast

from ..bilm.batching import SentenceRunner
from ..errors import SettingError
from ..launch_env import launch_env
from . import Loaded, RunSettings


def device_for_rank(device: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """ "cuda" under a launcher means this process's GPU (LOCAL_RANK); anything more specific is kept."""
    local_rank = launch_env(environ).local_rank
    return f"cuda:{local_rank}" if device == "cuda" and local_rank is not None else device


def prepare(bilm: Any, device: Optional[str] = None) -> Any:
    """A biLM as a runner holds it: no language-model softmax (never used to embed, and it can be most of the
    weights), trainable (fine-tuning), on `device` (None: thinc's current device)."""
    from thinc.api import get_torch_default_device

    if bilm.softmax is not None or bilm.options.n_tokens_vocab:
        bilm.softmax = None
        options = bilm.options.model_copy(update={"n_tokens_vocab": 0})
        for module in (bilm, bilm.token_encoder, bilm.lstm):
            module.options = options
    bilm.vocab = None
    for param in bilm.parameters():
        param.requires_grad_(True)
    return bilm.to(get_torch_default_device() if device is None else device_for_rank(device))


def _prepared(load: Callable[[], Loaded], device: Optional[str]) -> Any:
    """The runner's loader (module-level, so that the runner pickles); `load` gives `load_model`'s answer."""
    loaded: Any = load()
    return prepare(loaded.bilm, device)


class TorchRuntime:
    trainable = True
    spawn_workers = False  # each forked worker loads the model

    def check(self, run: RunSettings) -> None:
        """The precision, on the device where one is given (the layer's is thinc's)."""
        from ..bilm.precision import check_device, check_precision

        check_precision(run.precision)
        if run.fine_tune and run.precision == "int8":
            raise SettingError(
                "true needs gradients, and precision 'int8' has none; fine-tune with precision 'fp32' or 'bf16', "
                "or keep the biLM frozen (fine_tune = false) to use int8",
                "fine_tune",
            )
        if run.device is not None:
            import torch

            from ..bilm.runner import parse_device

            kind = run.device.split(":")[0]
            if kind in ("cpu", "cuda"):  # a precision for another device is refused first, on any machine
                check_device(run.precision, torch.device(kind))
            mine = device_for_rank(run.device)  # the device the runner will use (`prepare`)
            try:
                parse_device(mine)
            except SettingError as err:
                if mine != run.device:
                    err.args = (f"{err.args[0]} (cuda under a launcher is cuda:LOCAL_RANK, here {mine})",)
                raise

    def load(self, path: str, sha256: Optional[str]) -> Loaded:
        from ..io.resolve import load_model

        return load_model(path, sha256)

    def runner(
        self, run: RunSettings, loaded: Optional[Loaded] = None, load: Optional[Callable[[], Loaded]] = None
    ) -> SentenceRunner:
        from ..bilm.runner import BiLMRunner

        return BiLMRunner(
            None if loaded is None else prepare(cast(Any, loaded).bilm, run.device),
            load=None if load is None else functools.partial(_prepared, load, run.device),
            token_budget=run.token_budget,
            stateful=run.stateful,
            token_cache_size=run.token_cache_size,
            precision=run.precision,
            n_threads=run.n_threads,
        )

    def pin_threads(self, n_threads: int) -> None:
        """Before the model is loaded: a forked worker's first parallel op would otherwise wait forever for the
        OpenMP pool it inherits from its parent only as bookkeeping."""
        import torch

        torch.set_num_threads(n_threads)
