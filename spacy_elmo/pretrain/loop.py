"""The training loop of a biLM language model: steps, evaluations, checkpoints, metrics, stopping."""

import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
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
    ) -> torch.Tensor:
        out = self.bilm(char_ids, dropout=dropout)
        softmax = self.bilm.softmax
        assert softmax is not None  # checked in __init__
        hidden = out.layers[-1]
        f, b, n = directional_nll(hidden, next_ids, prev_ids, softmax.weight, softmax.bias, samples, log_expected)
        return (f + b) / (2 * n)


@dataclass
class TrainResult:
    """What `pretrain` returns: the final state, the last dev evaluation and every step's loss."""

    output_dir: Path
    state: TrainState
    last_eval: Optional[dict[str, float]] = None
    losses: list[float] = field(default_factory=list)


@dataclass
class Optimization:
    """One optimization step as the config describes it; the negatives are drawn from `sampler_rng`, the same on
    every process."""

    bilm: BiLM
    module: nn.Module  # LanguageModelLoss(bilm), wrapped in DistributedDataParallel when there are peers
    optimizer: torch.optim.Optimizer
    learn_rate: Callable[[int], float]
    sampler: Optional[LogUniformSampler]  # None: the full softmax
    sampler_rng: torch.Generator
    settings: TrainingSection  # its dropout and grad_clip
    amp_dtype: Optional[torch.dtype]  # None: full precision
    device: torch.device

    def __post_init__(self) -> None:
        self.log_expected = self.sampler.log_expected.to(self.device) if self.sampler is not None else None
        # float16 needs its gradients scaled; for any other precision the scaler passes everything through
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)

    def step(self, batch: LMBatch, step: int, meanwhile: Callable[[], None] = lambda: None) -> float:
        """The loss of step `step` (0-based), checked to be finite. `meanwhile` runs once the step's work is
        queued and before its loss is read: on a GPU, host work done while the step runs."""
        samples = self.sampler.sample(self.sampler_rng).to(self.device) if self.sampler is not None else None
        optimizer, scaler, dropout = self.optimizer, self.scaler, self.settings.dropout
        for group in optimizer.param_groups:
            group["lr"] = self.learn_rate(step)
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            loss = self.module(batch.char_ids, batch.next_ids, batch.prev_ids, samples, self.log_expected, dropout)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if self.settings.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.bilm.parameters(), self.settings.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():  # "no token" row of the character embedding stays zero
            self.bilm.token_encoder.char_embedding[0].zero_()
        meanwhile()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"training loss became {value} at step {step + 1}; lower the learning rate")
        return value


@dataclass
class TrainingLoop:
    """The loop over the parts build.py made; one per process under torchrun, rank 0 writing the outputs.

    Stops at the first limit, or at SIGTERM/SIGINT after finishing the step, with a checkpoint either way, so
    that `--resume` continues exactly where it stopped.
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
    stopped_by_clock: bool = field(default=False, init=False)  # some process reached max_minutes
    _next: Optional[tuple[tuple[int, int], LMBatch]] = field(default=None, init=False)  # (epoch, index), batch

    def run(self) -> TrainResult:
        """Train until a limit or a stop signal; checkpoint, evaluate and save the model at the end."""
        s = self.settings
        with stop_signals() as stop:
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
            if stop:
                self.report.say(f"stopping at step {self.state.step} (signal {stop[-1]})")
            else:
                self._say_if_the_clock_ended_it()
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
        """One optimization step on the next batch; the batch after it is made while the device runs this step."""
        state = self.state
        t0 = time.perf_counter()
        here = (state.epoch, state.index)
        batch = self._next[1] if self._next is not None and self._next[0] == here else self._batch_at(here)
        after = (
            (state.epoch + 1, 0) if state.index + 1 >= self.batcher.steps_per_epoch else (state.epoch, state.index + 1)
        )

        def make_next() -> None:
            self._next = (after, self._batch_at(after))

        loss = self.optimization.step(batch, state.step, meanwhile=make_next)
        state.step += 1
        state.epoch, state.index = after
        n_tokens = batch.n_tokens * self.place.world
        state.tokens += n_tokens
        step_time = time.perf_counter() - t0
        state.wall_s = self._wall_at_start + (time.perf_counter() - self._session_start)
        self.report.step(loss, n_tokens, step_time)

    def _batch_at(self, position: tuple[int, int]) -> LMBatch:
        return self.batcher.batch(*position).to(self.place.device)

    def _should_stop(self, stop: list[int]) -> bool:
        """Whether any process reached a limit or got a stop signal: all stop at the same step."""
        s, state = self.settings, self.state
        clock = bool(s.max_minutes and state.wall_s >= s.max_minutes * 60)
        done = bool(s.max_steps and state.step >= s.max_steps) or bool(s.max_epochs and state.epoch >= s.max_epochs)
        done, self.stopped_by_clock = any_process(
            [done or clock or bool(stop), clock], self.place.world, self.place.device
        )
        return done

    def _say_if_the_clock_ended_it(self) -> None:
        """A run that also has a step or epoch limit but ended on `max_minutes` gives a model that depends on
        how fast (and how busy) the machine was: said as a warning, with the step it reached."""
        s, state = self.settings, self.state
        last = s.last_step(self.batcher.steps_per_epoch)
        if last is not None and state.step < last and self.stopped_by_clock:  # any process's clock
            self.report.say(
                f"warning: training.max_minutes = {s.max_minutes} ended the run at step {state.step} of {last}: "
                f"this model depends on the machine's speed; with max_steps alone (max_minutes = 0) every "
                f"machine trains the same model, and `--resume` continues this one"
            )

    def _evaluate(self) -> None:
        self.evaluated_step = self.state.step
        self.last_eval = self.evaluate() if self.evaluate is not None else None
        if self.last_eval is not None:
            self.report.eval(self.state, self.last_eval)

    def _report(self) -> None:
        self.report.train(self.state, self.optimization.learn_rate(max(self.state.step - 1, 0)))

    def _restart_clock(self) -> None:
        """Count wall time from now on top of what the state holds (excludes evaluations and restarts)."""
        self._session_start, self._wall_at_start = time.perf_counter(), self.state.wall_s


@contextmanager
def stop_signals() -> Iterator[list[int]]:
    """SIGTERM/SIGINT while the loop runs, appended to the list yielded, so that every process finishes its
    step and stops with a checkpoint; the previous handlers come back afterwards."""
    received: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signum))
        except ValueError:  # not the main thread
            pass
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
