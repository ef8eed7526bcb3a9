"""Find and load a biLM from whatever the user points at: a native directory, a bilm-tf/AllenNLP
directory or HDF5 file, or the name of a model shipped in the package ("" is the shipped default).

`resolve_model` is the one place that turns such a path into files, and `load_model` loads them with
every check: each array's shape and values (`arrays.py`), a native file's recorded digest, and the digest
a user pinned. `load_model` also says what was loaded, by content: `sha256` is what `verify` prints and a
pin is compared with (a native model's recorded digest, or the SHA-256 of a bilm-tf .hdf5 file, as
`sha256sum` prints it), `content_sha256` covers everything that shapes the vectors (for bilm-tf: the .hdf5
and options.json), which is what `embed` outputs are bound to.
Every error names the path and says what was expected there.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ..bilm.bilm import BiLM
from .archive import ArchiveModel, find_model, is_archive, member_names
from .digest import check_pin, combined_sha256, file_sha256, parse_pin
from .efml import (
    CHAR_DIC,
    CONFIG_FILE,
    ENCODER_FILE,
    MODEL_FILES,
    TOKEN_EMBEDDER_FILE,
    WORD_DIC,
    EfmlFiles,
    is_efml,
    read_efml,
)
from .hdf5 import load_bilm_tf
from .native import MODEL_FILE, OPTIONS_FILE, inspect_native, is_native

PathLike = Union[str, Path]
SHIPPED_MODELS_DIR = Path(__file__).parent.parent / "models"
DEFAULT_MODEL = "en_elmo_small"
WEIGHT_FILE_NAMES = ("weights.hdf5", "lm_weights.hdf5")
EFML_FILES = (CONFIG_FILE, CHAR_DIC, WORD_DIC, TOKEN_EMBEDDER_FILE, ENCODER_FILE)
EXPECTED = (
    "a native model directory, a bilm-tf/AllenNLP directory (options.json + one .hdf5 [+ vocab.txt]), an "
    ".hdf5 weight file with options.json beside it, a .zip archive of such a model (the NLPL repository's), "
    "or an ELMoForManyLangs directory (config.json, char.dic, token_embedder.pkl, encoder.pkl)"
)


@dataclass(frozen=True)
class ModelSource:
    """The files of one model. `kind` is "native" (model.msgpack), "bilm-tf" (HDF5) or "efml"
    (ELMoForManyLangs: `options_file` is its config.json, `weight_file` its encoder.pkl); a bilm-tf model in
    a zip archive has `archive`, and its files are named `archive.zip/member`."""

    kind: str
    path: Path
    options_file: Path
    weight_file: Path
    vocab_file: Optional[Path] = None
    archive: Optional[ArchiveModel] = None
    efml_prefix: Optional[str] = None  # an ELMoForManyLangs model in a zip archive: its folder there


def shipped_model_path(name: str = DEFAULT_MODEL) -> Path:
    return SHIPPED_MODELS_DIR / name


def available_models() -> list[str]:
    if not SHIPPED_MODELS_DIR.exists():
        return []
    return sorted(p.name for p in SHIPPED_MODELS_DIR.iterdir() if is_native(p))


def resolve_model(path: PathLike, options_file: Optional[PathLike] = None, option: str = "") -> ModelSource:
    """The files behind `path`; `option` names the setting the path came from, for the error message."""
    where = f" ({option})" if option else ""
    if str(path) == "":
        target = shipped_model_path()
        if not is_native(target):
            raise FileNotFoundError(
                f"the default biLM '{DEFAULT_MODEL}' is not installed (expected a native model directory at "
                f"{target}){where}. Give a model explicitly: {EXPECTED}"
            )
    else:
        target = Path(path)
        if not target.exists() and (SHIPPED_MODELS_DIR / str(path)).exists():
            target = SHIPPED_MODELS_DIR / str(path)
        if not target.exists():
            shipped = ", ".join(available_models()) or "none installed"
            raise FileNotFoundError(
                f"biLM path {str(path)!r} does not exist{where}. Give {EXPECTED}, or a shipped model name ({shipped})"
            )
    if is_archive(target):
        prefix, inside = member_names(target, where)
        if all(name in inside for name in MODEL_FILES):  # an ELMoForManyLangs model, zipped
            return ModelSource("efml", target, target / CONFIG_FILE, target / ENCODER_FILE, efml_prefix=prefix)
        members = find_model(target, where)
        return ModelSource(
            "bilm-tf",
            target,
            target / members.options,
            target / members.weights,
            target / members.vocab if members.vocab else None,
            members,
        )
    if is_efml(target):
        return ModelSource("efml", target, target / CONFIG_FILE, target / ENCODER_FILE)
    if target.is_dir():
        if is_native(target):
            return ModelSource("native", target, target / OPTIONS_FILE, target / MODEL_FILE)
        weights = [target / n for n in WEIGHT_FILE_NAMES if (target / n).exists()][:1]
        weights = weights or sorted(target.glob("*.hdf5")) + sorted(target.glob("*.h5"))
        if len(weights) != 1:
            raise FileNotFoundError(
                f"{target}{where}: expected a native model ({MODEL_FILE}), a weight file named one of "
                f"{WEIGHT_FILE_NAMES}, or exactly one .hdf5 file beside options.json; found {len(weights)}"
            )
        weight_file = weights[0]
        options = Path(options_file) if options_file else target / OPTIONS_FILE
    else:
        weight_file = target
        options = Path(options_file) if options_file else target.with_name(OPTIONS_FILE)
    vocab = weight_file.with_name("vocab.txt")
    return ModelSource("bilm-tf", target, options, weight_file, vocab if vocab.exists() else None)


@dataclass(frozen=True)
class LoadedModel:
    """A biLM and what it was loaded from (see the module docstring for the two digests)."""

    bilm: BiLM
    source: ModelSource
    sha256: str
    sha256_of: str
    content_sha256: str
    converted_from: Optional[dict[str, Any]] = None

    def describe(self) -> dict[str, Any]:
        """What an output records of its model."""
        return {
            "path": str(self.source.path),
            "format": self.source.kind,
            "sha256": self.sha256,
            "content_sha256": self.content_sha256,
        }


def load_model(
    path: PathLike,
    options_file: Optional[PathLike] = None,
    option: str = "",
    sha256: Optional[str] = None,
    sha256_option: str = "--sha256",
) -> LoadedModel:
    """Load a biLM from anything `resolve_model` accepts, with every check; `sha256` pins its digest."""
    parse_pin(sha256, sha256_option)  # a malformed pin is refused before any file is read
    source = resolve_model(path, options_file, option)
    if source.kind == "native":
        native = inspect_native(source.path)
        check_pin(native.sha256, sha256, str(source.weight_file), sha256_option)
        return LoadedModel(
            native.bilm,
            source,
            native.sha256,
            "recorded in the file and checked",
            native.sha256,
            native.converted_from,
        )
    if source.kind == "efml":  # one digest over every file the model is made of
        files, parts = _efml_parts(source)
        content = combined_sha256(parts)
        check_pin(content, sha256, str(source.path), sha256_option)
        return LoadedModel(read_efml(files), source, content, "of the model's files", content)
    if source.archive is not None:  # the digests of the members' bytes: the same as the unzipped files'
        members = source.archive
        weights_sha256 = members.sha256(members.weights)
        check_pin(weights_sha256, sha256, str(source.weight_file), sha256_option)
        bilm = members.load()
        options_sha256 = members.sha256(members.options)
        sha256_of = f"of {source.weight_file.name} in {source.path.name}"
    else:
        if not source.weight_file.exists():
            raise FileNotFoundError(f"weight file not found: {source.weight_file}")
        weights_sha256 = file_sha256(source.weight_file)
        check_pin(weights_sha256, sha256, str(source.weight_file), sha256_option)
        bilm = load_bilm_tf(source.options_file, source.weight_file, source.vocab_file)
        options_sha256 = file_sha256(source.options_file)
        sha256_of = f"of {source.weight_file.name}"
    content = combined_sha256({"weights": weights_sha256, "options": options_sha256})
    return LoadedModel(bilm, source, weights_sha256, sha256_of, content)


def _efml_parts(source: ModelSource) -> tuple[EfmlFiles, dict[str, Optional[str]]]:
    """How to read an ELMoForManyLangs model, and the SHA-256 of each of its files (its .dic, .pkl and
    .json files), by name: the same for a directory and for the zip archive of it."""

    def wanted(name: str) -> bool:
        return name in EFML_FILES or name.endswith(".json")

    if source.efml_prefix is None:
        paths = [p for p in sorted(source.path.iterdir()) if p.is_file() and wanted(p.name)]
        return EfmlFiles.directory(source.path), {p.name: file_sha256(p) for p in paths}
    _, inside = member_names(source.path)
    files = EfmlFiles.archive(source.path, source.efml_prefix)
    names = sorted(name for name in inside if "/" not in name and wanted(name))
    return files, {name: hashlib.sha256(files.read(name)).hexdigest() for name in names}


def load_bilm(
    path: PathLike, options_file: Optional[PathLike] = None, option: str = "", sha256: Optional[str] = None
) -> BiLM:
    """Load a biLM from anything `resolve_model` accepts (`load_model` without the description)."""
    return load_model(path, options_file, option, sha256).bilm
