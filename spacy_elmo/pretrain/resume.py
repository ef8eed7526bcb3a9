"""Resuming a run: the checkpoint it continues from, checked against this run's config and data.

A checkpoint records its run's config and the SHA-256 of each training and dev file. Before anything is
written, other settings than `RESUMABLE_CHANGES` are refused, and so is changed data unless
`--accept-changed-data` is given: then each change is logged, recorded in metrics.jsonl and bound from the
next checkpoint on.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from thinc.api import Config

from ..dicts import changed_keys, flatten
from .checkpoint import latest_checkpoint
from .config import PretrainConfigError, PretrainSettings
from .corpus import file_digests
from .distributed import Log

ACCEPT_CHANGED_DATA = "--accept-changed-data"
DATA_ROLES = {"train": "training data", "dev": "dev data"}
DataDigests = dict[str, list[list[str]]]
"""{"train": [[path, sha256], ...], "dev": [...]}: what a checkpoint records of the data (no "dev": none)."""

# Settings that may differ between a run and its resumption: they change when it stops, what it reports, or its
# speed (threads, device), not what is trained. Anything else would continue a run that was not trained that way.
RESUMABLE_CHANGES = (
    "training.max_steps",
    "training.max_epochs",
    "training.max_minutes",
    "training.log_every",
    "training.eval_every",
    "training.checkpoint_every",
    "training.keep_checkpoints",
    "training.n_threads",
    "training.device",
    "paths.dev",
    "corpus.dev",
    "corpus.max_dev_tokens",
    "corpus.cache_dir",
    "paths.init_from",  # a checkpoint's weights win over init_from on resume
)


class ResumeDataError(ValueError):
    """Resuming on training or dev data whose content differs from what the checkpoint recorded."""


@dataclass(frozen=True)
class DataChange:
    """A data file whose content differs from the checkpoint's record: its "data_changed" record in metrics.jsonl."""

    data: str  # "train" or "dev"
    path: str
    checkpoint_sha256: Optional[str]
    sha256: Optional[str]  # now

    def describe(self) -> str:
        before, after = self.checkpoint_sha256, self.sha256  # None: absent on that side
        was = f"SHA-256 {before} in the checkpoint" if before else "not in the checkpoint's data"
        now = f"{after} now" if after else "no longer in the data"
        return f"{DATA_ROLES[self.data]} {self.path}: {was}, {now}"


@dataclass
class ResumePoint:
    """The checkpoint a resumed run continues from, the settings it changes and the data changes accepted."""

    path: Path
    payload: dict[str, Any]
    changes: dict[str, tuple[Any, Any]]
    data_changes: list[DataChange] = field(default_factory=list)


def find_resume_point(config: Config, checkpoint_dir: Path, say: Log) -> Optional[ResumePoint]:
    """The newest readable checkpoint (None: none) and its settings that `config` changes, {key: (saved, now)};
    a change outside `RESUMABLE_CHANGES` is refused: the checkpoint was not trained that way."""
    found = latest_checkpoint(checkpoint_dir, warn=say)
    if found is None:
        say(f"no readable checkpoint in {checkpoint_dir}: starting from the beginning")
        return None
    path, payload = found
    before, after = Config().from_str(payload["config"], interpolate=True), Config(config).interpolate()
    then, now = flatten(before), flatten(after)
    changes = {key: (then.get(key), now.get(key)) for key in changed_keys(before, after)}
    refused = {key: values for key, values in changes.items() if key not in RESUMABLE_CHANGES}
    if refused:
        listed = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in refused.items())
        raise PretrainConfigError(
            f"cannot resume from {path}: the run was trained with other settings ({listed}). Resume with "
            f"the checkpoint's settings (its config is saved in the checkpoint and in config.cfg), or start a "
            f"new run in another output directory. Safe to change on resume: {', '.join(RESUMABLE_CHANGES)}"
        )
    for key, (old, new) in changes.items():
        say(f"resuming with {key} changed: {old!r} -> {new!r}")
    return ResumePoint(path, payload, changes)


def data_digests(settings: PretrainSettings) -> DataDigests:
    """The SHA-256 of every training file and every dev file (corpus.py `file_digests`)."""
    C = settings.corpus
    digests = {"train": file_digests(C.train)}
    if C.dev:
        digests["dev"] = file_digests(C.dev)
    return digests


def check_resume_data(found: ResumePoint, digests: DataDigests, accept: bool, say: Log) -> list[DataChange]:
    """The data files whose content differs from `found`'s record: refused unless `accept`, then logged. The dev
    data is not compared when the config changed corpus.dev (an allowed change)."""
    recorded = found.payload["data"]
    changes: list[DataChange] = []
    for role in DATA_ROLES:
        if role == "dev" and "corpus.dev" in found.changes:
            continue
        before = dict(recorded.get(role) or [])  # {path: sha256}
        after = dict(digests.get(role) or [])
        changes.extend(
            DataChange(role, path, before.get(path), after.get(path))
            for path in dict.fromkeys([*after, *before])
            if before.get(path) != after.get(path)
        )
    if changes and not accept:
        roles = " and the ".join(dict.fromkeys(DATA_ROLES[change.data] for change in changes))
        raise ResumeDataError(
            f"cannot resume from {found.path}: the {roles} changed since it was written "
            f"({'; '.join(change.describe() for change in changes)}). Restore the data the run was trained on, "
            f"start a new run in another output directory, or resume with {ACCEPT_CHANGED_DATA} to continue on "
            f"the changed data (logged, and recorded in metrics.jsonl)"
        )
    for change in changes:
        say(f"warning: resuming on changed {change.describe()} ({ACCEPT_CHANGED_DATA})")
    return changes
