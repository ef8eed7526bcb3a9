"""The training loop of a biLM language model: steps, evaluations, checkpoints, metrics, stopping.

`Trainer` runs what train.py assembled from the config (model, optimizer, data, random generators);
`train_step` is one optimization step, the same function in training and in
benchmarks/train_throughput.py, so that the benchmark measures what training does.
"""

import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from thinc.api import Config
from torch import nn

from ..bilm.bilm import BiLM
from ..io.native import bilm_to_bytes, save_native
from . import checkpoint as ckpt
from .batches import LMBatch, WindowBatcher
from .config import PretrainConfigError
from .corpus import TokenStream
from .distributed import any_process, barrier, gather_bytes
from .metrics import MetricsLog
from .perplexity import stream_perplexity
from .sampled_softmax import LogUniformSampler, directional_nll
from .vocab import Vocab

Log = Callable[[str], None]


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
    """How one optimization step runs: the training config's dropout, grad_clip and mixed_precision."""

    dropout: float = 0.0
    grad_clip: float = 0.0  # 0: no clipping
    amp_dtype: Optional[torch.dtype] = None  # autocast to this dtype; None: full precision


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
class TrainState:
    """Everything besides the weights that a resumed run needs to continue exactly (a checkpoint's
    "trainer" entry)."""

    step: int = 0
    """Optimizer steps taken (checkpoints are named by it)."""
    epoch: int = 0
    """Epochs completed: with the seed, it picks the order of the windows (`WindowBatcher`)."""
    index: int = 0
    """The next batch of the current epoch."""
    tokens: int = 0
    """Training tokens seen, all processes together."""
    wall_s: float = 0.0
    """Seconds spent training (evaluations left out), for `max_minutes`."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TrainResult:
    """What `pretrain` returns: the final state, the last dev evaluation and every step's loss."""

    output_dir: Path
    state: TrainState
    last_eval: Optional[dict[str, float]] = None
    losses: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class TrainerSettings:
    """When the loop stops, logs, evaluates and checkpoints, and how each step runs."""

    # when to stop: the first limit reached (0: no such limit)
    max_steps: int = 0
    max_epochs: int = 0
    max_minutes: float = 0.0
    # every how many steps (0: never; a checkpoint and an evaluation come at the end regardless)
    log_every: int = 10
    eval_every: int = 0
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    max_dev_tokens: Optional[int] = None
    step: StepSettings = StepSettings()

    @classmethod
    def from_config(cls, config: Config, device: torch.device) -> "TrainerSettings":
        T = config["training"]
        amp_dtype = (torch.float16 if device.type == "cuda" else torch.bfloat16) if T["mixed_precision"] else None
        return cls(
            max_steps=int(T["max_steps"] or 0),
            max_epochs=int(T["max_epochs"] or 0),
            max_minutes=float(T["max_minutes"] or 0),
            log_every=int(T["log_every"]),
            eval_every=int(T["eval_every"] or 0),
            checkpoint_every=int(T["checkpoint_every"] or 0),
            keep_checkpoints=int(T["keep_checkpoints"]),
            max_dev_tokens=config["corpus"]["max_dev_tokens"],
            step=StepSettings(dropout=T["dropout"], grad_clip=T["grad_clip"] or 0.0, amp_dtype=amp_dtype),
        )

    def check_limits(self) -> None:
        """A run needs an end: refuse one that would train until killed."""
        if not (self.max_steps or self.max_epochs or self.max_minutes):
            raise PretrainConfigError(
                "set at least one of training.max_steps, training.max_epochs, training.max_minutes"
            )


@dataclass
class Trainer:
    """The loop over the parts train.py built; one per process under torchrun, rank 0 writing the outputs.

    Stops at the first of the configured limits, or at SIGTERM/SIGINT after finishing the step, with a
    checkpoint either way, so that `--resume` continues exactly where it stopped.
    """

    bilm: BiLM
    train_module: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: Optional[torch.amp.GradScaler]
    batcher: WindowBatcher
    learn_rate: Callable[[int], float]
    sampler: Optional[LogUniformSampler]
    sampler_rng: torch.Generator
    vocab: Vocab
    dev: Optional[TokenStream]
    settings: TrainerSettings
    device: torch.device
    rank: int
    world: int
    output_dir: Path
    metrics: MetricsLog
    config_text: str
    log: Log
    state: TrainState = field(default_factory=TrainState)
    losses: list[float] = field(default_factory=list)
    last_eval: Optional[dict[str, float]] = None
    stop_signal: Optional[int] = None

    def __post_init__(self) -> None:
        self.log_expected = self.sampler.log_expected.to(self.device) if self.sampler is not None else None
        self.is_main = self.rank == 0
        self.checkpoint_dir = self.output_dir / "checkpoints"
        self.say = main_process_log(self.log, self.rank)
        # the steps since the last train record (what it averages): first loss, tokens, seconds
        self._interval_first, self._interval_tokens, self._interval_time = 0, 0, 0.0
        self._session_start = time.perf_counter()
        self._wall_at_start = 0.0

    def restore(self, path: Path, payload: dict[str, Any]) -> None:
        """Continue from checkpoint `payload` (its weights are already in the model): optimizer, counters,
        data position and every random generator, so that the losses repeat the uninterrupted run's."""
        self.optimizer.load_state_dict(ckpt.decode_tree(payload["optimizer"]))
        self.state = TrainState(**payload["trainer"])
        ckpt.set_generator_state(self.sampler_rng, payload["rng"]["sampler"])
        torch.set_rng_state(torch.frombuffer(bytearray(payload["rng"]["torch"][self.rank]), dtype=torch.uint8))
        if self.device.type == "cuda" and payload["rng"].get("cuda"):
            cuda_state = torch.frombuffer(bytearray(payload["rng"]["cuda"][self.rank]), dtype=torch.uint8)
            torch.cuda.set_rng_state(cuda_state, self.device)
        self.say(f"resumed from {path} (step {self.state.step}, epoch {self.state.epoch}, {self.state.tokens} tokens)")

    def run(self) -> TrainResult:
        """Train until a limit or a stop signal; checkpoint, evaluate and save the model at the end."""
        self.settings.check_limits()
        s = self.settings
        with self._stop_signals():
            if self.state.step == 0 and self.dev is not None:
                self.evaluate()
            self._restart_clock()
            while not self.should_stop():
                self.step()
                step = self.state.step
                if step % s.log_every == 0 or (s.max_steps and step >= s.max_steps):
                    self.log_interval()
                if s.eval_every and step % s.eval_every == 0:
                    self.evaluate()
                    self._restart_clock()  # evaluation time not counted
                if s.checkpoint_every and step % s.checkpoint_every == 0:
                    self.save_checkpoint()
            self.log_interval()
            if self.stop_signal is not None:
                self.say(f"stopping at step {self.state.step} (signal {self.stop_signal})")
            if not (s.checkpoint_every and self.state.step % s.checkpoint_every == 0):
                self.save_checkpoint()
            if self.dev is not None and not (s.eval_every and self.state.step % s.eval_every == 0):
                self.evaluate()
            if self.is_main:
                save_native(self.bilm.cpu() if self.device.type != "cpu" else self.bilm, self.output_dir / "model")
                state = self.state
                self.say(f"saved model to {self.output_dir / 'model'} (step {state.step}, {state.tokens} tokens)")
        barrier(self.world)
        return TrainResult(output_dir=self.output_dir, state=self.state, last_eval=self.last_eval, losses=self.losses)

    def step(self) -> float:
        """One optimization step on the next batch of the data order; advances the counters. The loss."""
        state = self.state
        t0 = time.perf_counter()
        batch = self.batcher.batch(state.epoch, state.index).to(self.device)
        samples = self.sampler.sample(self.sampler_rng).to(self.device) if self.sampler is not None else None
        for group in self.optimizer.param_groups:
            group["lr"] = self.learn_rate(state.step)
        loss_tensor = train_step(
            self.train_module,
            self.bilm,
            self.optimizer,
            batch,
            samples,
            self.log_expected,
            self.settings.step,
            self.scaler,
        )
        loss = float(loss_tensor)
        if not math.isfinite(loss):
            raise FloatingPointError(f"training loss became {loss} at step {state.step + 1}; lower the learning rate")
        state.step += 1
        state.index += 1
        if state.index >= self.batcher.steps_per_epoch:
            state.epoch, state.index = state.epoch + 1, 0
        n_tokens = batch.n_tokens * self.world
        state.tokens += n_tokens
        step_time = time.perf_counter() - t0
        state.wall_s = self._wall_at_start + (time.perf_counter() - self._session_start)
        self.losses.append(loss)
        self._interval_tokens += n_tokens
        self._interval_time += step_time
        return loss

    def should_stop(self) -> bool:
        """Whether any process reached a limit or got a stop signal: all stop at the same step."""
        return any_process(self._done_here(), self.world, self.device)

    def _done_here(self) -> bool:
        s, state = self.settings, self.state
        if s.max_steps and state.step >= s.max_steps:
            return True
        if s.max_epochs and state.epoch >= s.max_epochs:
            return True
        if s.max_minutes and state.wall_s >= s.max_minutes * 60:
            return True
        return self.stop_signal is not None

    def evaluate(self) -> Optional[dict[str, float]]:
        """Dev perplexity (rank 0, when there is a dev corpus): logged, written to metrics.jsonl, kept."""
        if self.dev is None or not self.is_main:
            self.last_eval = None
            return None
        state = self.state
        result = stream_perplexity(self.bilm, self.dev, self.vocab, max_tokens=self.settings.max_dev_tokens)
        self.metrics.write(
            {
                "type": "eval",
                "step": state.step,
                "tokens": state.tokens,
                "wall_s": round(state.wall_s, 3),
                **{f"dev_{k}": v for k, v in result.items()},
            }
        )
        self.say(
            f"step {state.step:>7}  dev ppl {result['average_ppl']:.2f} (forward {result['forward_ppl']:.2f}, "
            f"backward {result['backward_ppl']:.2f})"
        )
        self.last_eval = result
        return result

    def save_checkpoint(self) -> None:
        """Write a checkpoint (rank 0) with every rank's random state; collective, so all ranks call it."""
        cuda = self.device.type == "cuda"
        torch_states = gather_bytes(torch.get_rng_state().numpy().tobytes(), self.world)
        cuda_states = None
        if cuda:
            cuda_states = gather_bytes(torch.cuda.get_rng_state(self.device).numpy().tobytes(), self.world)
        if not self.is_main:
            return
        payload = {
            "model": bilm_to_bytes(self.bilm),
            "optimizer": ckpt.encode_tree(self.optimizer.state_dict()),
            "trainer": self.state.to_dict(),
            "rng": {"sampler": ckpt.generator_state(self.sampler_rng), "torch": torch_states, "cuda": cuda_states},
            "config": self.config_text,
        }
        path = ckpt.write_checkpoint(self.checkpoint_dir, self.state.step, payload)
        ckpt.prune_checkpoints(self.checkpoint_dir, self.settings.keep_checkpoints)
        self.say(f"checkpoint {path}")

    def log_interval(self) -> None:
        """One train record (metrics.jsonl and the log) averaging the steps since the last one."""
        state, losses = self.state, self.losses[self._interval_first :]
        if not losses:
            return
        mean = sum(losses) / len(losses)  # the same additions, in the same order, as a running total
        tps = self._interval_tokens / max(self._interval_time, 1e-9)
        self.metrics.write(
            {
                "type": "train",
                "step": state.step,
                "epoch": state.epoch,
                "tokens": state.tokens,
                "train_loss": mean,
                "train_ppl": math.exp(min(mean, 50.0)),
                "lr": self.learn_rate(max(state.step - 1, 0)),
                "tokens_per_s": round(tps, 1),
                "wall_s": round(state.wall_s, 3),
            }
        )
        self.say(
            f"step {state.step:>7}  epoch {state.epoch}  tokens {state.tokens:>10}  loss {mean:.4f}  "
            f"ppl {math.exp(min(mean, 50.0)):9.2f}  {tps:8.0f} tokens/s"
        )
        self._interval_first, self._interval_tokens, self._interval_time = len(self.losses), 0, 0.0

    def _restart_clock(self) -> None:
        """Count wall time from now on top of what the state holds (excludes evaluations and restarts)."""
        self._session_start, self._wall_at_start = time.perf_counter(), self.state.wall_s

    def _request_stop(self, signum: int, frame: Any) -> None:
        """Signal handler: finish the step, checkpoint, then exit."""
        self.stop_signal = signum

    @contextmanager
    def _stop_signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT request a stop while the loop runs (every process: under torchrun a stop reaches
        all); the previous handlers come back afterwards, also when training fails."""
        previous: dict[signal.Signals, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                previous[sig] = signal.signal(sig, self._request_stop)
            except ValueError:  # not the main thread
                pass
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def main_process_log(log: Log, rank: int) -> Log:
    """`log` on rank 0, nothing on the other ranks: one copy of every line is enough."""
    return log if rank == 0 else _quiet


def _quiet(message: str) -> None:
    pass
