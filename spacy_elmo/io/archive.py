"""Models inside a `.zip` archive, read in place: the NLPL word-embedding repository's layout.

The NLPL repository ships its ELMo models as zip archives holding a bilm-tf model (`model.hdf5`,
`options.json`, usually `vocab.txt`) and a `meta.json` describing the corpus; a few hold an
ELMoForManyLangs model instead (read by `efml.py` through `member_names` and `read_member`). The members are read from
the archive into memory (nothing is unpacked on disk); the files may be at the archive's root or in one
top-level folder. A member's digest is that of its bytes, so a model gets the same digests from its
archive as from the unzipped directory (`resolve.py`).
"""

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..bilm.bilm import BiLM
from ..bilm.options import BiLMOptions, OptionsError
from .hdf5 import parse_vocab, read_bilm_tf

OPTIONS_MEMBER = "options.json"
WEIGHT_MEMBERS = ("model.hdf5", "weights.hdf5", "lm_weights.hdf5")
VOCAB_MEMBER = "vocab.txt"
META_MEMBER = "meta.json"


class ArchiveError(ValueError):
    """A zip archive that is unreadable or does not hold one model."""


def is_archive(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".zip"


@dataclass(frozen=True)
class ArchiveModel:
    """The members of one bilm-tf model in an archive (full member names)."""

    archive: Path
    options: str
    weights: str
    vocab: Optional[str] = None
    meta: Optional[str] = None

    def name(self, member: str) -> str:
        """How errors name a member: `archive.zip/member`, as `zipfile.Path` does."""
        return f"{self.archive}/{member}"

    def read(self, member: str) -> bytes:
        return read_member(self.archive, member)

    def sha256(self, member: str) -> str:
        return hashlib.sha256(self.read(member)).hexdigest()

    def metadata(self) -> Optional[dict[str, Any]]:
        """The archive's meta.json (the NLPL repository's description of the model), if it has one."""
        if self.meta is None:
            return None
        try:
            data = json.loads(self.read(self.meta).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise ArchiveError(f"{self.name(self.meta)}: not valid JSON ({err})") from None
        return data if isinstance(data, dict) else {"meta": data}

    def load(self) -> BiLM:
        """The biLM, with the same checks as a bilm-tf directory (`hdf5.read_bilm_tf`)."""
        options_source = self.name(self.options)
        try:
            data = json.loads(self.read(self.options).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise OptionsError(f"{options_source}: not a valid JSON options file ({err})") from None
        options = BiLMOptions.from_dict(data, source=options_source)
        vocab = parse_vocab(self.read(self.vocab).decode("utf-8")) if self.vocab is not None else None
        weights = io.BytesIO(self.read(self.weights))
        return read_bilm_tf(options, Path(self.name(self.weights)), data=weights, vocab=vocab)


def member_names(archive: Path, where: str = "") -> tuple[str, dict[str, str]]:
    """(the folder the files are in, {name inside it: full member name}) of an archive's files."""
    try:
        with zipfile.ZipFile(archive) as handle:
            names = [info.filename for info in handle.infolist() if not info.is_dir()]
    except (zipfile.BadZipFile, OSError) as err:
        raise ArchiveError(f"{archive}{where}: not a readable zip archive ({err})") from None
    folders = {name.split("/", 1)[0] + "/" if "/" in name else "" for name in names}
    prefix = folders.pop() if len(folders) == 1 else ""
    return prefix, {name[len(prefix) :]: name for name in names if name.startswith(prefix)}


def read_member(archive: Path, member: str) -> bytes:
    """A member's bytes; FileNotFoundError naming it when the archive lacks it."""
    try:
        with zipfile.ZipFile(archive) as handle:
            return handle.read(member)
    except KeyError:
        raise FileNotFoundError(f"{archive}/{member}: missing from the archive") from None
    except (zipfile.BadZipFile, OSError) as err:
        raise ArchiveError(f"{archive}/{member}: cannot be read from the archive ({err})") from None


def find_model(archive: Path, where: str = "") -> ArchiveModel:
    """The model members of `archive` (at its root or in one top-level folder), or an ArchiveError naming
    what is missing."""
    _, inside = member_names(archive, where)
    names = list(inside.values())
    weights = [inside[n] for n in WEIGHT_MEMBERS if n in inside][:1]
    weights = weights or [
        full for short, full in inside.items() if short.endswith((".hdf5", ".h5")) and "/" not in short
    ]
    if OPTIONS_MEMBER not in inside or len(weights) != 1:
        found = ", ".join(sorted(names)[:12]) or "nothing"
        raise ArchiveError(
            f"{archive}{where}: expected a bilm-tf model in the archive ({OPTIONS_MEMBER} and one .hdf5 weight "
            f"file such as {WEIGHT_MEMBERS[0]}, at its root or in one folder), found {found}"
        )
    return ArchiveModel(archive, inside[OPTIONS_MEMBER], weights[0], inside.get(VOCAB_MEMBER), inside.get(META_MEMBER))
