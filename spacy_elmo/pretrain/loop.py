"""The training loop of a biLM language model: steps, evaluations, checkpoints, metrics, stopping.

`train_step` is one optimization step, the same function in training and in
benchmarks/train_throughput.py, so that the benchmark measures what training does.
"""

import math
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Optional

import torch
from torch import nn

from ..bilm.bilm import BiLM
from ..io.native import save_native
from .batches import LMBatch, WindowBatcher
from .checkpoint import Checkpointer, TrainState
from .config import TrainingSection
from .distributed import Placement, any_process, barrier
from .metrics_log import TrainingLog
from .sampled_softmax import LogUniformSampler, directional_nll


class LanguageModelLoss(nn.Module):
    """The biLM and its softmax as one module, so that DDP sees a single forward and backward."""

    def __init__(self, bilm: BiLM) -> None:
        super().__init__()
        if bilm.softmax is None:
            raise ValueError("training needs a biLM with a softmax")
        self.bilm = bilm

    def forward(
        self,
        char_ids: torch.Tensor,
        next_ids: torch.Tensor,
        prev_ids: torch.Tensor,
        samples: Optional[torch.Tensor],
        log_expected: Optional[torch.Tensor],
        dropout: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.bilm(char_ids, dropout=dropout)
        softmax = self.bilm.softmax
        assert softmax is not None  # checked in __init__
        hidden = out.layers[-1]
        f, b, n = directional_nll(hidden, next_ids, prev_ids, softmax.weight, softmax.bias, samples, log_expected)
        loss = (f + b) / (2 * n)
        return loss, f.detach() / n, b.detach() / n


@dataclass(frozen=True)
class StepSettings:
    """How one optimization step runs: the training config's dropout, grad_clip and precision."""

    dropout: float = 0.0
    grad_clip: float = 0.0  # 0: no clipping
    amp_dtype: Optional[torch.dtype] = None  # autocast to this dtype; None: full precision

    @classmethod
    def from_settings(cls, settings: TrainingSection, device: torch.device) -> "StepSettings":
        return cls(dropout=settings.dropout, grad_clip=settings.grad_clip, amp_dtype=settings.amp_dtype(device))


def train_step(
    model: nn.Module,
    bilm: BiLM,
    optimizer: torch.optim.Optimizer,
    batch: LMBatch,
    samples: Optional[torch.Tensor],
    log_expected: Optional[torch.Tensor],
    settings: StepSettings,
    scaler: Optional[torch.amp.GradScaler] = None,
) -> torch.Tensor:
    """One optimization step on `batch` (forward, backward, clipping, update); the loss, detached.

    `model` is `LanguageModelLoss(bilm)` or its DistributedDataParallel wrapper; `scaler` only for
    float16 autocast on CUDA. Reading the returned loss synchronizes a GPU, so that is left to the caller.
    """
    device_type = batch.char_ids.device.type
    amp = settings.amp_dtype is not None
    with torch.autocast(device_type, dtype=settings.amp_dtype) if amp else nullcontext():
        loss, _, _ = model(batch.char_ids, batch.next_ids, batch.prev_ids, samples, log_expected, settings.dropout)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    if settings.grad_clip:
        torch.nn.utils.clip_grad_norm_(bilm.parameters(), settings.grad_clip)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():  # "no token" row of the character embedding stays zero
        bilm.token_encoder.char_embedding[0].zero_()
    return loss.detach()


@dataclass
class TrainResult:
    """What `pretrain` returns: the final state, the last dev evaluation and every step's loss."""

    output_dir: Path
    state: TrainState
    last_eval: Optional[dict[str, float]] = None
    losses: list[float] = field(default_factory=list)


@dataclass
class Optimization:
    """One optimization step on a batch, as the config describes it: the learning rate of the step, the
    sampled softmax's negatives (drawn from `sampler_rng`, the same on every process), `train_step`."""

    bilm: BiLM
    module: nn.Module  # LanguageModelLoss(bilm), wrapped in DistributedDataParallel when there are peers
    optimizer: torch.optim.Optimizer
    learn_rate: Callable[[int], float]
    sampler: Optional[LogUniformSampler]  # None: the full softmax
    sampler_rng: torch.Generator
    settings: StepSettings
    device: torch.device
    scaler: Optional[torch.amp.GradScaler] = None

    def __post_init__(self) -> None:
        self.log_expected = self.sampler.log_expected.to(self.device) if self.sampler is not None else None

    def step(self, batch: LMBatch, step: int) -> float:
        """Step number `step` (0-based) on `batch`: the loss, checked to be finite."""
        samples = self.sampler.sample(self.sampler_rng).to(self.device) if self.sampler is not None else None
        for group in self.optimizer.param_groups:
            group["lr"] = self.learn_rate(step)
        loss_tensor = train_step(
            self.module, self.bilm, self.optimizer, batch, samples, self.log_expected, self.settings, self.scaler
        )
        loss = float(loss_tensor)
        if not math.isfinite(loss):
            raise FloatingPointError(f"training loss became {loss} at step {step + 1}; lower the learning rate")
        return loss


@dataclass
class TrainingLoop:
    """The loop over the parts build.py made; one per process under torchrun, rank 0 writing the outputs.

    Stops at the first of the configured limits, or at SIGTERM/SIGINT after finishing the step, with a
    checkpoint either way, so that `--resume` continues exactly where it stopped; evaluates (rank 0, with a
    dev corpus) at the start, every `eval_every` steps and at the end; saves the model to OUTPUT_DIR/model.
    """

    optimization: Optimization
    batcher: WindowBatcher
    settings: TrainingSection
    place: Placement
    checkpointer: Checkpointer
    evaluate: Optional[Callable[[], dict[str, float]]]  # None: no dev corpus, or not rank 0
    report: TrainingLog
    output_dir: Path
    state: TrainState
    last_eval: Optional[dict[str, float]] = field(default=None, init=False)
    evaluated_step: Optional[int] = field(default=None, init=False)  # the step of this session's last evaluation

    def __post_init__(self) -> None:
        self._restart_clock()

    def run(self) -> TrainResult:
        """Train until a limit or a stop signal; checkpoint, evaluate and save the model at the end."""
        s = self.settings
        with StopSignals() as stop:
            if self.state.step == 0:
                self._evaluate()
            self._restart_clock()
            while not self._should_stop(stop):
                self._step()
                step = self.state.step
                if step % s.log_every == 0 or (s.max_steps and step >= s.max_steps):
                    self._report()
                if s.eval_every and step % s.eval_every == 0:
                    self._evaluate()
                    self._restart_clock()  # evaluation time not counted
                if s.checkpoint_every and step % s.checkpoint_every == 0:
                    self.checkpointer.save(self.state)
            self._report()
            if stop.received is not None:
                self.report.say(f"stopping at step {self.state.step} (signal {stop.received})")
            if self.checkpointer.saved_step != self.state.step:
                self.checkpointer.save(self.state)
            if self.evaluated_step != self.state.step:
                self._evaluate()
            if self.place.is_main:
                bilm, model_dir, state = self.optimization.bilm, self.output_dir / "model", self.state
                save_native(bilm.cpu() if self.place.device.type != "cpu" else bilm, model_dir)
                self.report.say(f"saved model to {model_dir} (step {state.step}, {state.tokens} tokens)")
        barrier(self.place.world)
        return TrainResult(self.output_dir, self.state, self.last_eval, self.report.losses)

    def _step(self) -> None:
        """One optimization step on the next batch of the data order; advances the counters."""
        state = self.state
        t0 = time.perf_counter()
        batch = self.batcher.batch(state.epoch, state.index).to(self.place.device)
        loss = self.optimization.step(batch, state.step)
        state.step += 1
        state.index += 1
        if state.index >= self.batcher.steps_per_epoch:
            state.epoch, state.index = state.epoch + 1, 0
        n_tokens = batch.n_tokens * self.place.world
        state.tokens += n_tokens
        step_time = time.perf_counter() - t0
        state.wall_s = self._wall_at_start + (time.perf_counter() - self._session_start)
        self.report.step(loss, n_tokens, step_time)

    def _should_stop(self, stop: "StopSignals") -> bool:
        """Whether any process reached a limit or got a stop signal: all stop at the same step."""
        s, state = self.settings, self.state
        done = (
            bool(s.max_steps and state.step >= s.max_steps)
            or bool(s.max_epochs and state.epoch >= s.max_epochs)
            or bool(s.max_minutes and state.wall_s >= s.max_minutes * 60)
            or stop.received is not None
        )
        return any_process(done, self.place.world, self.place.device)

    def _evaluate(self) -> None:
        """Dev perplexity (rank 0, when there is a dev corpus): logged, written to metrics.jsonl, kept."""
        self.evaluated_step = self.state.step
        self.last_eval = self.evaluate() if self.evaluate is not None else None
        if self.last_eval is not None:
            self.report.eval(self.state, self.last_eval)

    def _report(self) -> None:
        """A train record of the steps since the last one, with the rate of the last step."""
        self.report.train(self.state, self.optimization.learn_rate(max(self.state.step - 1, 0)))

    def _restart_clock(self) -> None:
        """Count wall time from now on top of what the state holds (excludes evaluations and restarts)."""
        self._session_start, self._wall_at_start = time.perf_counter(), self.state.wall_s


class StopSignals:
    """SIGTERM/SIGINT while the loop runs: remembered in `received`, so that every process finishes its step
    and stops with a checkpoint (under torchrun a stop reaches all); the previous handlers come back
    afterwards, also when training fails."""

    def __init__(self) -> None:
        self.received: Optional[int] = None
        self._previous: dict[signal.Signals, Any] = {}

    def _request_stop(self, signum: int, frame: Any) -> None:
        self.received = signum

    def __enter__(self) -> "StopSignals":
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[sig] = signal.signal(sig, self._request_stop)
            except ValueError:  # not the main thread
                pass
        return self

    def __exit__(
        self, kind: Optional[type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
