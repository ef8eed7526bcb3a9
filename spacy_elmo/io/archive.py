"""The zip container: one model in a `.zip` archive (the NLPL repository's layout), read in place, never
unpacked. Each member is inflated within a `Limit`, what its role can need; an encrypted member, one
zipfile cannot inflate, or a name held twice is refused, naming it, and so is a damaged archive or member
(`damage.damaged_as`: whatever zipfile and zlib raise on it).
"""

import posixpath
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..disk import OPTIONS_FILE, WEIGHT_SUFFIXES
from ..errors import ModelFileError
from .damage import damaged_as

WEIGHT_MEMBERS = ("model.hdf5", "weights.hdf5", "lm_weights.hdf5")
PICKLE_SUFFIX = ".pkl"  # ELMoForManyLangs' state dicts (token_embedder.pkl, encoder.pkl)
VOCAB_MEMBER = "vocab.txt"
_MiB = 1 << 20
_METHOD_NAMES: dict[int, str] = getattr(zipfile, "compressor_names", {})  # zipfile's names of zip methods


class ArchiveError(ModelFileError):
    """A zip archive that is unreadable or does not hold one model."""


@dataclass(frozen=True)
class Limit:
    """The most bytes a member may inflate to, and what that bound is (for the refusal)."""

    size: int
    what: str


# Each well above what the largest public models need: JSON files of a few kB, vocab.txt of the 1B Word
# Benchmark (6.6 MB), the 374 MB HDF5 file of the original ELMo (in float64 too).
JSON_LIMIT = Limit(1 * _MiB, "a JSON file (options, config, meta)")
VOCABULARY_LIMIT = Limit(64 * _MiB, "a vocabulary (vocab.txt, char.dic, word.dic)")
WEIGHTS_LIMIT = Limit(1 << 30, "any ELMo weight file (the largest public one is 374 MB)")
WEIGHTS_SLACK = 16 * _MiB  # a container's own structure (HDF5 headers and B-trees, pickle framing)


def role_limit(member: str) -> Limit:
    """A member's limit by its file name's suffix, when nothing more is known."""
    if member.endswith(".json"):
        return JSON_LIMIT
    if member.endswith((".txt", ".dic")):
        return VOCABULARY_LIMIT
    return WEIGHTS_LIMIT


def _models(names: list[str]) -> dict[tuple[str, str], list[str]]:
    """{(folder, "" or ending in "/"; format): its model files} for every place a model is."""
    models: dict[tuple[str, str], list[str]] = {}
    for name in names:
        folder, _, base = name.rpartition("/")
        if base == OPTIONS_FILE or base.endswith(WEIGHT_SUFFIXES):
            kind = "bilm-tf"
        elif base.endswith(PICKLE_SUFFIX):
            kind = "ELMoForManyLangs"
        else:
            continue
        models.setdefault((folder + "/" if folder else "", kind), []).append(base)
    return models


def _refuse_repeated(archive: Path, names: list[str]) -> None:
    """Refuse two members of one name as an unzip tool writes it (zipfile would read the last silently)."""
    seen: dict[str, list[str]] = {}
    for name in names:
        seen.setdefault(posixpath.normpath("/" + name.replace("\\", "/")).lstrip("/"), []).append(name)
    for name, raw in seen.items():
        if len(raw) > 1:
            spelled = "" if set(raw) == {name} else f", spelled {', '.join(map(repr, raw))}"
            raise ArchiveError(
                f"{archive}: holds {len(raw)} members named {name}{spelled}; which one is the model's "
                "cannot be known (zipfile reads the last, an unzip tool may keep the first): zip the model again "
                "with each file once"
            )


def member_names(archive: Path) -> tuple[str, dict[str, str]]:
    """(the model's folder, {name inside it: member name}); more than one model, or a repeated name, is refused."""
    unreadable = damaged_as(ArchiveError, f"{archive}", "not a readable zip archive")
    with unreadable, zipfile.ZipFile(archive) as handle:
        infos = handle.infolist()
    names = [info.filename for info in infos if not info.is_dir()]
    missing = -min((info.header_offset for info in infos), default=0)
    if missing > 0:  # zipfile places the members by where the central directory is found: some before byte 0
        raise ArchiveError(
            f"{archive}: not a readable zip archive (its central directory places members up to {missing} "
            "bytes before the file's start: its beginning is missing, as in a cut or partial download)"
        )
    _refuse_repeated(archive, names)
    models = _models(names)
    if len(models) > 1:
        found = "; ".join(
            f"{'in ' + folder if folder else 'at the root'} ({kind}): {', '.join(sorted(files))}"
            for (folder, kind), files in sorted(models.items())
        )
        raise ArchiveError(
            f"{archive}: holds more than one model ({found}); a model cannot be chosen inside an "
            "archive: unzip it and give the folder (or weight file) of the one you mean"
        )
    if models:
        ((prefix, _),) = models
    else:  # no model anywhere: the one top-level folder, for find_model to say what is missing there
        tops = {name.split("/", 1)[0] + "/" if "/" in name else "" for name in names}
        prefix = tops.pop() if len(tops) == 1 else ""
    return prefix, {name[len(prefix) :]: name for name in names if name.startswith(prefix)}


def member_blocks(archive: Path, member: str, limit: Optional[Limit] = None) -> Iterator[bytes]:
    """A member's bytes in blocks, within `limit` (by default `role_limit`); FileNotFoundError when absent."""
    limit = limit or role_limit(member)
    name = f"{archive}/{member}"
    beyond = f"more than {limit.what} can need ({limit.size} bytes)"
    why = "a damaged archive or a zip bomb (a model really this large loads from its unzipped directory)"
    # every read of the archive, from its opening to the member's last block (a member's offset before the
    # archive's start, a bad header, a damaged compressed stream, a bad CRC) is refused naming the member
    with damaged_as(ArchiveError, name, "cannot be read from the archive"), zipfile.ZipFile(archive) as handle:
        info = handle.NameToInfo.get(member)
        if info is None:
            raise FileNotFoundError(f"{name}: missing from the archive")
        if info.flag_bits & 0x1:  # ZipCrypto or AES
            raise ArchiveError(
                f"{name}: encrypted (password-protected), which spacy-elmo does not read: unzip it with its password"
            )
        if info.file_size > limit.size:
            raise ArchiveError(f"{name}: declares {info.file_size} bytes inflated, {beyond}; refused unread: {why}")
        try:
            stream = handle.open(info)
        except (NotImplementedError, RuntimeError) as err:  # a method zipfile lacks (or its bz2, lzma module)
            method = info.compress_type
            raise ArchiveError(
                f"{name}: compressed with method {method} ({_METHOD_NAMES.get(method, 'unknown')}), which Python's "
                f"zipfile cannot inflate ({err}): unzip it with a tool that can, or zip it again with deflate"
            ) from None
        with stream:
            read = 0
            while block := stream.read(min(_MiB, limit.size + 1 - read)):
                read += len(block)
                if read > limit.size:  # more than the header declares: stop at limit + 1 bytes
                    raise ArchiveError(f"{name}: inflates past {limit.size} bytes, {beyond}: {why}")
                yield block


def bilm_tf_weights(archive: Path, inside: dict[str, str]) -> str:
    """The name of the one weight file beside options.json in the model's folder (`member_names`' `inside`)."""
    weights = sorted(short for short in inside if short.endswith(WEIGHT_SUFFIXES) and "/" not in short)
    if OPTIONS_FILE in inside and len(weights) > 1:
        raise ArchiveError(
            f"{archive}: holds {len(weights)} weight files beside {inside[OPTIONS_FILE]} "
            f"({', '.join(inside[short] for short in weights)}); which one is the model's cannot be chosen inside "
            "an archive: unzip it and give the weight file you mean (the options.json beside it is read)"
        )
    if OPTIONS_FILE not in inside or len(weights) != 1:
        found = ", ".join(sorted(inside.values())[:12]) or "nothing"
        raise ArchiveError(
            f"{archive}: expected a bilm-tf model in the archive ({OPTIONS_FILE} and one .hdf5 weight "
            f"file such as {WEIGHT_MEMBERS[0]}, at its root or in one folder), found {found}"
        )
    return weights[0]
