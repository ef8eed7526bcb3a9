"""What a run reports, written by rank 0 only: metrics.jsonl (one JSON object a line, {"type": "train" | "eval"
| an event such as "data_changed", "step", ...}) and the lines of its log."""

import json
import math
from pathlib import Path
from typing import Any

from .checkpoint import TrainState
from .distributed import Log, main_process_log


class TrainingLog:
    """The train and eval records of a run, in metrics.jsonl (append-only) and as log lines (rank 0; the
    others keep their losses but write nothing). A train record averages the steps since the previous one."""

    def __init__(self, path: Path, rank: int, log: Log) -> None:
        self.path, self.enabled = path, rank == 0
        self.say = main_process_log(log, rank)
        self.losses: list[float] = []  # every step's loss, this session
        # the steps since the last train record (what it averages): first loss, tokens, seconds
        self._interval_first, self._interval_tokens, self._interval_time = 0, 0, 0.0

    def truncate_after(self, step: int) -> None:
        """Drop the records after the resumed `step`, so that the file reads as if the run had never stopped."""
        if not self.enabled or not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        self.path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    def step(self, loss: float, n_tokens: int, seconds: float) -> None:
        self.losses.append(loss)
        self._interval_tokens += n_tokens
        self._interval_time += seconds

    def train(self, state: TrainState, learn_rate: float) -> None:
        """One train record averaging the steps since the last one (none: nothing to write)."""
        losses = self.losses[self._interval_first :]
        if not losses:
            return
        mean = sum(losses) / len(losses)  # the same additions, in the same order, as a running total
        tps = self._interval_tokens / max(self._interval_time, 1e-9)
        self.write(
            {
                "type": "train",
                "step": state.step,
                "epoch": state.epoch,
                "tokens": state.tokens,
                "train_loss": mean,
                "train_ppl": math.exp(min(mean, 50.0)),
                "lr": learn_rate,
                "tokens_per_s": round(tps, 1),
                "wall_s": round(state.wall_s, 3),
            }
        )
        self.say(
            f"step {state.step:>7}  epoch {state.epoch}  tokens {state.tokens:>10}  loss {mean:.4f}  "
            f"ppl {math.exp(min(mean, 50.0)):9.2f}  {tps:8.0f} tokens/s"
        )
        self._interval_first, self._interval_tokens, self._interval_time = len(self.losses), 0, 0.0

    def eval(self, state: TrainState, result: dict[str, float]) -> None:
        self.write(
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
