"""SHA-256 digests of files, the one digest of a model, and the digest a user pins a model to. A pin must
cover every file of a model (an edited options.json gives other vectors), so each model has ONE digest,
`model_digest`, which `spacy elmo verify` prints and `check_pin` checks.
"""

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import SettingError

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ModelFile:
    """One file of a model: its role ("options", "weights", "vocab"; ELMoForManyLangs: its name), where it is
    (a path, or `archive.zip/member`) and the SHA-256 of its bytes."""

    role: str
    path: str
    sha256: str


def model_digest(files: Iterable[ModelFile]) -> str:
    """The SHA-256 of the sorted lines "role:sha256\\n": by role, not name or place, so a model has one digest
    in a directory, beside its options.json and in a .zip archive."""
    digest = hashlib.sha256()
    for role, sha256 in sorted({file.role: file.sha256 for file in files}.items()):
        digest.update(f"{role}:{sha256}\n".encode())
    return digest.hexdigest()


def parse_pin(pin: Optional[str]) -> Optional[str]:
    """A pinned digest as given by the user (64 hex digits, any case), normalized; None when not pinned."""
    if pin is None or pin == "":
        return None
    normalized = pin.strip().lower() if isinstance(pin, str) else ""
    if not _HEX64.match(normalized):
        raise SettingError(f"{pin!r} is not a SHA-256 digest (64 hexadecimal digits)", "sha256")
    return normalized


def check_pin(actual: str, pin: Optional[str], model: str, files: Sequence[ModelFile] = ()) -> None:
    """Refuse the `model` whose digest `actual` is not the pinned one; a pin of one of its `files` alone (the
    weights' `sha256sum`) is refused naming the digest to pin instead."""
    expected = parse_pin(pin)
    if expected is None or actual == expected:
        return
    alone = next((file for file in files if file.sha256 == expected), None)
    if alone is not None:
        names = ", ".join(Path(file.path).name for file in files)
        raise SettingError(
            f"{model}: the pin {expected} is the SHA-256 of {alone.path} alone; a pin must be the digest of the "
            f"whole model ({names}), or an edited file beside it would load unnoticed: if these are the files "
            f"you validated, pin {actual} instead (`spacy elmo verify` prints it)",
            "sha256",
        )
    raise SettingError(
        f"{model}: SHA-256 {actual} differs from the pinned digest ({expected}); the model was changed, damaged "
        "or replaced since it was pinned (`spacy elmo verify` prints a model's digest)",
        "sha256",
    )
