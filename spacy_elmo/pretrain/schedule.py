"""The learning rate as a pure function of the step: linear warm-up, then constant or decaying.

Being a function of the step alone keeps resume exact (a resumed run needs only the step) and lets a
resumed run take a new peak rate from the command line, as the shipped model's training did: its dev
perplexity fell 15% in the 1,000 steps after its rate was cut by hand at step 2,000 (see its model
card); a decay does that without a restart. It is no help to a run too short to reach a plateau: the
project's 600-step biLM ends at 238 dev perplexity with a constant rate, 261 with linear and 266 with
cosine decay (project/results/README.md).
"""

import math
from dataclasses import dataclass

from thinc.api import Config

from .config import PretrainConfigError

DECAYS = ("none", "linear", "cosine")


@dataclass(frozen=True)
class LearnRateSchedule:
    """`peak` after `warmup_steps`; with a decay, down to `final_ratio * peak` at step `horizon`."""

    peak: float
    warmup_steps: int = 0
    decay: str = "none"
    horizon: int = 0
    final_ratio: float = 0.0

    def __call__(self, step: int) -> float:
        if self.warmup_steps and step < self.warmup_steps:
            return self.peak * (step + 1) / self.warmup_steps
        if self.decay == "none":
            return self.peak
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.horizon - self.warmup_steps))
        if self.decay == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.peak * (self.final_ratio + (1.0 - self.final_ratio) * shape)


def schedule_from_config(config: Config, steps_per_epoch: int) -> LearnRateSchedule:
    """The schedule [training.optimizer] asks for; a decay runs until training.max_steps (or max_epochs)."""
    o, T = config["training"]["optimizer"], config["training"]
    decay = str(o["decay"]).lower()
    if decay not in DECAYS:
        raise PretrainConfigError(f"training.optimizer.decay is {o['decay']!r}; expected one of {DECAYS}")
    final_ratio = float(o["final_learn_rate_ratio"])
    if not 0.0 <= final_ratio <= 1.0:
        raise PretrainConfigError(f"training.optimizer.final_learn_rate_ratio is {final_ratio}; expected 0 to 1")
    horizon = int(T["max_steps"] or 0) or int(T["max_epochs"] or 0) * steps_per_epoch
    if decay != "none" and not horizon:
        raise PretrainConfigError(
            f"training.optimizer.decay is {decay!r} but neither training.max_steps nor training.max_epochs "
            "is set: the decay needs the step it ends at (max_minutes alone does not give one)"
        )
    return LearnRateSchedule(float(o["learn_rate"]), int(o["warmup_steps"] or 0), decay, horizon, final_ratio)
