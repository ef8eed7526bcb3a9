"""The zip container: a model inside a `.zip` archive (the NLPL repository's layout: a bilm-tf model, or a
few ELMoForManyLangs ones, with a `meta.json`), read in place, never unpacked on disk. The model may be at
the archive's root or in a folder, and must be the only one in the archive; which format it is in is the
format readers' concern (`files.py`).

Nothing is inflated without a bound: each member has a `Limit`, what its role can need, checked against
the size the archive declares and against the bytes actually inflated. An encrypted member, one compressed
with a method zipfile cannot inflate, or a name held twice (zipfile would read the last one silently) is
refused, naming it.
"""

import hashlib
import posixpath
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ModelFileError

OPTIONS_MEMBER = "options.json"
WEIGHT_MEMBERS = ("model.hdf5", "weights.hdf5", "lm_weights.hdf5")
WEIGHT_SUFFIXES = (".hdf5", ".h5")
PICKLE_SUFFIX = ".pkl"  # ELMoForManyLangs' state dicts (token_embedder.pkl, encoder.pkl)
VOCAB_MEMBER = "vocab.txt"
_MiB = 1 << 20
_BLOCK = _MiB
_METHOD_NAMES: dict[int, str] = getattr(zipfile, "compressor_names", {})  # zipfile's names of zip methods
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zipfile.BadZipFile, OSError, EOFError, zlib.error)
try:
    import lzma

    _INFLATE_ERRORS += (lzma.LZMAError,)
except ImportError:  # a Python built without lzma: zipfile then refuses lzma members at open
    pass


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
    """A member's limit by its kind when nothing more is known (its file name's suffix)."""
    if member.endswith(".json"):
        return JSON_LIMIT
    if member.endswith((".txt", ".dic")):
        return VOCABULARY_LIMIT
    return WEIGHTS_LIMIT


def is_archive(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".zip"


def _models(names: list[str]) -> dict[tuple[str, str], list[str]]:
    """{(folder: "" for the root, else ending in "/"; format): its model files} for every place a model
    is (options.json or an .hdf5/.h5 weight file: bilm-tf; a .pkl state dict: ELMoForManyLangs)."""
    models: dict[tuple[str, str], list[str]] = {}
    for name in names:
        folder, _, base = name.rpartition("/")
        if base == OPTIONS_MEMBER or base.endswith(WEIGHT_SUFFIXES):
            kind = "bilm-tf"
        elif base.endswith(PICKLE_SUFFIX):
            kind = "ELMoForManyLangs"
        else:
            continue
        models.setdefault((folder + "/" if folder else "", kind), []).append(base)
    return models


def _refuse_repeated(archive: Path, where: str, names: list[str]) -> None:
    """A zip may hold two members of one name (zipfile keeps both, and reads the last): which bytes are
    the model's cannot be known, so such an archive is refused, naming the name. Names are compared as
    an unzip tool writes them: backslashes as folder separators, "." and ".." segments and a leading "/"
    resolved."""
    seen: dict[str, list[str]] = {}
    for name in names:
        seen.setdefault(posixpath.normpath("/" + name.replace("\\", "/")).lstrip("/"), []).append(name)
    for name, raw in seen.items():
        if len(raw) > 1:
            spelled = "" if set(raw) == {name} else f", spelled {', '.join(map(repr, raw))}"
            raise ArchiveError(
                f"{archive}{where}: holds {len(raw)} members named {name}{spelled}; which one is the model's "
                "cannot be known (zipfile reads the last, an unzip tool may keep the first): zip the model again "
                "with each file once"
            )


def member_names(archive: Path, where: str = "") -> tuple[str, dict[str, str]]:
    """(the folder the model's files are in, {name inside it: full member name}); an archive holding
    models in more than one place, or of two formats, or two members of one name, is refused, naming them."""
    try:
        with zipfile.ZipFile(archive) as handle:
            names = [info.filename for info in handle.infolist() if not info.is_dir()]
    except (zipfile.BadZipFile, OSError) as err:
        raise ArchiveError(f"{archive}{where}: not a readable zip archive ({err})") from None
    _refuse_repeated(archive, where, names)
    models = _models(names)
    if len(models) > 1:
        found = "; ".join(
            f"{'in ' + folder if folder else 'at the root'} ({kind}): {', '.join(sorted(files))}"
            for (folder, kind), files in sorted(models.items())
        )
        raise ArchiveError(
            f"{archive}{where}: holds more than one model ({found}); a model cannot be chosen inside an "
            "archive: unzip it and give the folder (or weight file) of the one you mean"
        )
    if models:
        ((prefix, _),) = models
    else:  # no model anywhere: the one top-level folder, for find_model to say what is missing there
        tops = {name.split("/", 1)[0] + "/" if "/" in name else "" for name in names}
        prefix = tops.pop() if len(tops) == 1 else ""
    return prefix, {name[len(prefix) :]: name for name in names if name.startswith(prefix)}


def _blocks(archive: Path, member: str, limit: Limit) -> Iterator[bytes]:
    """A member's bytes in blocks, refused (ArchiveError naming it) when it is encrypted, compressed in a
    way zipfile cannot inflate, or declares or inflates to more than `limit`; FileNotFoundError naming
    it when the archive lacks it."""
    name = f"{archive}/{member}"
    beyond = f"more than {limit.what} can need ({limit.size} bytes)"
    why = "a damaged archive or a zip bomb (a model really this large loads from its unzipped directory)"
    try:
        handle = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as err:
        raise ArchiveError(f"{name}: cannot be read from the archive ({err})") from None
    with handle:
        try:
            info = handle.getinfo(member)
        except KeyError:
            raise FileNotFoundError(f"{name}: missing from the archive") from None
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
        try:
            with stream:
                read = 0
                while block := stream.read(min(_BLOCK, limit.size + 1 - read)):
                    read += len(block)
                    if read > limit.size:  # more than the header declares: stop at limit + 1 bytes
                        raise ArchiveError(f"{name}: inflates past {limit.size} bytes, {beyond}: {why}")
                    yield block
        except _INFLATE_ERRORS as err:  # a bad CRC, a damaged compressed stream
            raise ArchiveError(f"{name}: cannot be read from the archive ({err})") from None


def read_member(archive: Path, member: str, limit: Optional[Limit] = None) -> bytes:
    """A member's bytes (at most `limit`, by default what its kind can need: `role_limit`); FileNotFoundError
    naming it when the archive lacks it."""
    return b"".join(_blocks(archive, member, limit or role_limit(member)))


def member_sha256(archive: Path, member: str, limit: Optional[Limit] = None) -> str:
    """The SHA-256 of a member's bytes, streamed in blocks (within the same limit as `read_member`)."""
    digest = hashlib.sha256()
    for block in _blocks(archive, member, limit or role_limit(member)):
        digest.update(block)
    return digest.hexdigest()


def bilm_tf_weights(archive: Path, inside: dict[str, str], where: str = "") -> str:
    """The weight file of the bilm-tf model in the archive's model folder (`member_names`' `inside`), by its
    name there; an ArchiveError naming what is missing or what is ambiguous."""
    weights = sorted(short for short in inside if short.endswith(WEIGHT_SUFFIXES) and "/" not in short)
    if OPTIONS_MEMBER in inside and len(weights) > 1:
        raise ArchiveError(
            f"{archive}{where}: holds {len(weights)} weight files beside {inside[OPTIONS_MEMBER]} "
            f"({', '.join(inside[short] for short in weights)}); which one is the model's cannot be chosen inside "
            "an archive: unzip it and give the weight file you mean (the options.json beside it is read)"
        )
    if OPTIONS_MEMBER not in inside or len(weights) != 1:
        found = ", ".join(sorted(inside.values())[:12]) or "nothing"
        raise ArchiveError(
            f"{archive}{where}: expected a bilm-tf model in the archive ({OPTIONS_MEMBER} and one .hdf5 weight "
            f"file such as {WEIGHT_MEMBERS[0]}, at its root or in one folder), found {found}"
        )
    return weights[0]
