"""The learning rate as a pure function of the step: linear warm-up, then constant or decaying.

Being a function of the step alone keeps resume exact (a resumed run needs only the step) and lets a
resumed run take a new peak rate from the command line, as the shipped model's training did: its dev
perplexity fell 15% in the 1,000 steps after its rate was cut by hand at step 2,000 (see its model
card); a decay does that without a restart. It is no help to a run too short to reach a plateau: the
project's 600-step biLM ends at 238 dev perplexity with a constant rate, 261 with linear and 266 with
cosine decay (project/results/README.md).

The config chooses a schedule by its registered name ([training.schedule], `@schedules`); another
schedule is one more registered subclass of `ScheduleSettings`.
"""

import math
from dataclasses import dataclass
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field
from thinc.api import registry


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


class ScheduleSettings(BaseModel):
    """The settings of a schedule, as [training.schedule] gives them; `schedule` makes the rate of every
    step once the run knows its peak rate (training.optimizer.learn_rate) and its last step."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @property
    def needs_last_step(self) -> bool:
        """Whether the schedule ends somewhere: a run without max_steps or max_epochs is then refused."""
        return False

    def schedule(self, peak: float, last_step: int) -> Callable[[int], float]:
        raise NotImplementedError


@registry.schedules("spacy-elmo.warmup_decay.v1")
class WarmupDecay(ScheduleSettings):
    """`LearnRateSchedule`: a linear warm-up over `warmup_steps`, then constant ("none") or decaying
    ("linear", "cosine") to `final_learn_rate_ratio` x the peak at the last step."""

    warmup_steps: int = Field(0, ge=0)
    decay: Literal["none", "linear", "cosine"] = "none"
    final_learn_rate_ratio: float = Field(0.0, ge=0.0, le=1.0)

    @property
    def needs_last_step(self) -> bool:
        return self.decay != "none"

    def schedule(self, peak: float, last_step: int) -> LearnRateSchedule:
        return LearnRateSchedule(peak, self.warmup_steps, self.decay, last_step, self.final_learn_rate_ratio)
