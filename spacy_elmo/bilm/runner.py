"""The one way the biLM is run, for the pipe, `embed` and the Python API: character ids or sentences in,
float32 layers out. Stateless by default (every sentence from a zero state, so batch-independent); stateful
carries row i's state to the next batch (bilm-tf's mode). A stateless batch that runs out of memory is
split in halves and the token budget lowered: no sentence is dropped.
"""

import contextlib
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Callable, Optional

import numpy
import torch

from ..cpus import openmp_spins, threads_beside_other_work, usable_cpus
from ..errors import SettingError
from .batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET, GPU_TOKEN_BUDGET, SentenceRunner, token_slice
from .bilm import BiLM
from .lstm import BiLSTMStack, LSTMState
from .precision import check_device, products_for, slower_than_fp32_here


def is_out_of_memory(error: BaseException) -> bool:
    oom_type = getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(error, oom_type) or (isinstance(error, RuntimeError) and "out of memory" in str(error))


def parse_device(text: str) -> torch.device:
    """`text` ("cpu", "cuda", "cuda:N") as a device this machine has, or a `SettingError` of "device"."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise SettingError(f"{text!r} is not a device; use cpu, cuda or cuda:N", "device") from None
    if device.type == "cpu":
        return device
    count = torch.cuda.device_count() if device.type == "cuda" and torch.cuda.is_available() else 0
    if device.type != "cuda":
        raise SettingError(f"{text!r}: spacy-elmo runs on cpu or cuda[:N], not {device.type}", "device")
    if not count:
        raise SettingError(f"{text!r}: this machine has no CUDA device that torch can use; use cpu", "device")
    if device.index is not None and device.index >= count:
        raise SettingError(f"{text!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}", "device")
    return device


def check_threads(n_threads: int) -> int:
    """`n_threads` if it is a thread count (0: the runtime's default), else a `SettingError` of "n_threads"."""
    if n_threads < 0:
        raise SettingError(f"{n_threads}: give a number of threads, or 0 for the runtime's default", "n_threads")
    return n_threads


def default_threads(torch_count: int, per_batch: bool = False) -> int:
    """The threads for `n_threads` 0: torch's count, but no more than the CPUs this process may use (torch
    reads neither affinity nor cgroup quota). `per_batch` (chosen again for each batch): and, where OpenMP's
    threads spin when out of work (its default; not with OMP_WAIT_POLICY=PASSIVE set before torch is
    imported), no more than the CPUs other processes leave idle, as spinning threads beside other work ran
    several times slower than one (spacy_elmo.cpus); not for a whole run, which a passing load would fix."""
    if torch_count <= 1:  # the limits are read only where they could lower torch's count
        return torch_count
    during = min(torch_count, usable_cpus())
    if per_batch and during > 1 and openmp_spins():
        return threads_beside_other_work(during)
    return during


@contextlib.contextmanager
def torch_threads(n_threads: int, per_batch: bool = False) -> Iterator[None]:
    """Run with `n_threads` intra-op threads, then restore the caller's. 0: `default_threads`."""
    before = torch.get_num_threads()
    during = n_threads if n_threads > 0 else default_threads(before, per_batch)
    if during == before:
        yield
        return
    torch.set_num_threads(during)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class BiLMRunner(torch.nn.Module, SentenceRunner):
    """Runs a BiLM: `run` for a batch of character ids (the pipe), `embed_sentences` for words (numpy); the
    model given, or returned by `load` on first use."""

    def __init__(
        self,
        bilm: Optional[BiLM] = None,
        *,
        load: Optional[Callable[[], BiLM]] = None,
        token_budget: int = 0,
        stateful: bool = False,
        max_batch_size: Optional[int] = DEFAULT_MAX_BATCH_SIZE,
        token_cache_size: Optional[int] = None,
        precision: str = "fp32",
        n_threads: int = 0,
    ) -> None:
        super().__init__()
        if bilm is None and load is None:
            raise ValueError("BiLMRunner needs a biLM or a function that loads one")
        self._load = load
        self.bilm: Optional[BiLM] = None
        self.token_cache_size = token_cache_size
        self.products = products_for(precision)  # checks it; the prepared weights live here, not in the model
        self.token_budget = token_budget
        self.stateful = stateful
        self.max_batch_size = max_batch_size
        self.n_threads = n_threads  # torch threads while running (0: `default_threads`)
        self.n_splits = 0  # batches split after running out of memory
        self._pid = os.getpid()
        self._forked = False
        # stateful: row i of a batch continues row i of the previous one (detached: no gradient across batches)
        self._carried: Optional[LSTMState] = None
        self._checked_cpu = False  # whether this precision's speed on this CPU was checked (once, then warned)
        if bilm is not None:
            self.set_bilm(bilm)

    @property
    def precision(self) -> str:
        return self.products.precision

    @property
    def token_budget(self) -> int:
        """Padded tokens a batch: as set, or where 0 the device's default (a GPU's is larger)."""
        if self._token_budget:
            return self._token_budget
        on_gpu = self.bilm is not None and self.bilm.device.type == "cuda"
        return GPU_TOKEN_BUDGET if on_gpu else DEFAULT_TOKEN_BUDGET

    @token_budget.setter
    def token_budget(self, value: int) -> None:
        self._token_budget = value

    @property
    def loaded(self) -> bool:
        return self.bilm is not None

    def load(self) -> BiLM:
        """The biLM, loaded now if it has not been."""
        if self._pid != os.getpid():
            # First use in a forked process: one thread, as a forked child's first parallel product would wait
            # forever for the OpenMP pool it inherits only as bookkeeping (and N processes want one each).
            self._pid, self._forked = os.getpid(), True
            torch.set_num_threads(1)
        if self.bilm is None:
            assert self._load is not None
            self.set_bilm(self._load())
        assert self.bilm is not None
        return self.bilm

    def set_bilm(self, bilm: BiLM, device: Optional[torch.device] = None) -> None:
        if self.token_cache_size is not None:
            bilm.set_token_cache(self.token_cache_size)
        self.bilm = bilm.to(device) if device is not None else bilm
        self.products = products_for(self.precision)  # no prepared weights of a previous biLM kept alive
        self._carried = None

    def reset_state(self) -> None:
        """Stateful mode: forget the carried LSTM state."""
        self._carried = None

    def forward(self, batches: list[torch.Tensor]) -> list[torch.Tensor]:
        """Several batches in one call (the shim's entry: one backward pass for a whole doc batch)."""
        bilm = self.load()
        return [self.run(char_ids.to(bilm.device)) for char_ids in batches]

    def run(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(B, T, max_chars) ids -> (L+1, B, T, 2P) float32 layers, boundaries included."""
        try:
            return self._forward(char_ids)
        except (RuntimeError, MemoryError) as error:
            if self.stateful or not is_out_of_memory(error):  # a stateful batch's rows cannot be split
                raise
            n_tokens = char_ids.gt(0).any(-1).sum(-1)
            if char_ids.shape[0] == 1:
                raise MemoryError(
                    f"a single sentence of {int(n_tokens[0]) - 2} tokens does not fit in memory on "
                    f"{char_ids.device}; split long texts into sentences or windows first"
                ) from error
        self.n_splits += 1
        if char_ids.device.type == "cuda":
            torch.cuda.empty_cache()
        self.token_budget = max(1, min(self.token_budget, int(n_tokens.sum()) // 2))
        half = char_ids.shape[0] // 2
        return torch.cat([self.run(char_ids[:half]), self.run(char_ids[half:])], dim=1)

    def _forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        bilm = self.load()
        initial = self._carried_rows(bilm.lstm, char_ids.shape[0], char_ids.device) if self.stateful else None
        check_device(self.precision, char_ids.device)
        if char_ids.device.type == "cpu" and not self._checked_cpu:
            self._checked_cpu = True
            reason = slower_than_fp32_here(self.precision)
            if reason is not None:
                warnings.warn(
                    f"precision {self.precision!r} runs slower than 'fp32' on this CPU ({reason}); "
                    "use precision 'fp32' here, or a CPU with bf16/int8 instructions or a GPU",
                    stacklevel=2,
                )
        with torch_threads(0 if self._forked else self.n_threads, per_batch=True):
            output = bilm(char_ids, initial_state=initial, return_final_state=self.stateful, products=self.products)
        if self.stateful:
            self._carry(output.final_state)
        return output.layers.float()

    def _carried_rows(self, lstm: BiLSTMStack, n_rows: int, device: torch.device) -> LSTMState:
        """A stateful batch's initial state: views into the carried state, grown with zero rows as needed."""
        have = 0 if self._carried is None else self._carried.h.shape[2]
        if self._carried is None or have < n_rows:
            grown = lstm.zero_state(n_rows, device)
            if self._carried is not None:
                grown.h[:, :, :have] = self._carried.h
                grown.c[:, :, :have] = self._carried.c
            self._carried = grown
        return LSTMState(self._carried.h[:, :, :n_rows], self._carried.c[:, :, :n_rows])

    def _carry(self, final: Optional[LSTMState]) -> None:
        """Keep a stateful batch's final state for the rows it had."""
        if final is None or self._carried is None:
            raise ValueError("BiLMRunner._carry needs the final state of a batch started with _carried_rows()")
        n_rows = final.h.shape[2]
        self._carried.h[:, :, :n_rows] = final.h.detach()
        self._carried.c[:, :, :n_rows] = final.c.detach()

    @torch.no_grad()
    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[numpy.ndarray]:
        """One batch of sentences -> (L+1, n_tokens, 2P) float32 arrays (stateful mode carries by row)."""
        bilm = self.load()
        was_training = bilm.training
        bilm.eval()
        try:
            ids = bilm.batch_to_ids(sentences)
            # one copy back to the host for the whole batch
            layers = self.run(torch.from_numpy(ids).to(bilm.device)).cpu().numpy()
        finally:
            bilm.train(was_training)
        return [numpy.ascontiguousarray(layers[:, row, token_slice(0, len(s))]) for row, s in enumerate(sentences)]

    @torch.no_grad()
    def embed_tokens(self, tokens: Iterable[str], batch_size: int = 4096) -> numpy.ndarray:
        """Context-independent token vectors (n, P): what `elmo_token_embeddings.hdf5` holds."""
        bilm = self.load()
        tokens = list(tokens)
        out = []
        for start in range(0, len(tokens), batch_size):
            ids = bilm.tokens_to_ids(tokens[start : start + batch_size])
            vectors = bilm.token_encoder(torch.from_numpy(ids).to(bilm.device), self.products)
            out.append(vectors.float().cpu().numpy())
        return numpy.concatenate(out) if out else numpy.zeros((0, bilm.options.projection_dim), dtype=numpy.float32)
