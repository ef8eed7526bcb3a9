"""The learning rate as a pure function of the step: linear warm-up, then constant or decaying.

Being a function of the step alone keeps resume exact (a resumed run needs only the step). The config
chooses a schedule by its registered name ([training.schedule], `@schedules`).
"""

import math
from typing import Annotated, Callable, Literal, Optional

from pydantic import Field
from thinc.api import registry

from .optimizers import checked

LearnRate = Callable[[int, float, Optional[int]], float]
"""rate(step, peak, last_step): the rate of `step` (0-based); `last_step` is None when only max_minutes ends the
run, which a schedule that needs it refuses with a ValueError, whatever the step."""


@registry.schedules("spacy-elmo.warmup_decay.v1")
@checked
def warmup_decay(
    warmup_steps: Annotated[int, Field(ge=0)] = 0,
    decay: Literal["none", "linear", "cosine"] = "none",
    final_learn_rate_ratio: Annotated[float, Field(ge=0, le=1)] = 0.0,
) -> LearnRate:
    """A linear warm-up to the peak over `warmup_steps`, then constant ("none") or decaying ("linear",
    "cosine") to `final_learn_rate_ratio` x the peak at the last step, which a decay needs."""

    def rate(step: int, peak: float, last_step: Optional[int]) -> float:
        if decay != "none" and last_step is None:
            raise ValueError(
                f"training.schedule decays ({decay!r}) to the last step, but neither training.max_steps nor "
                "training.max_epochs is set (max_minutes alone does not give one)"
            )
        if warmup_steps and step < warmup_steps:
            return peak * (step + 1) / warmup_steps
        if decay == "none":
            return peak
        assert last_step is not None
        progress = min(1.0, (step - warmup_steps) / max(1, last_step - warmup_steps))
        shape = 1.0 - progress if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return peak * (final_learn_rate_ratio + (1.0 - final_learn_rate_ratio) * shape)

    return rate
