"""What a launcher (torchrun, a job array) tells a process about its place in a run: `pretrain` and
`embed` read it from here only."""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class LaunchEnv:
    """RANK (this process among all), WORLD_SIZE (how many), LOCAL_RANK (its index on its machine, so
    the GPU it uses); a process started without a launcher is rank 0 of 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: Optional[int] = None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _integer(env: Mapping[str, str], key: str, default: Optional[int]) -> Optional[int]:
    value = env.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"environment variable {key}={value!r} must be an integer (set by torchrun or a job launcher)"
        ) from None


def launch_env(environ: Optional[Mapping[str, str]] = None) -> LaunchEnv:
    env = os.environ if environ is None else environ
    return LaunchEnv(
        rank=_integer(env, "RANK", 0) or 0,
        world_size=_integer(env, "WORLD_SIZE", 1) or 1,
        local_rank=_integer(env, "LOCAL_RANK", None),
    )
