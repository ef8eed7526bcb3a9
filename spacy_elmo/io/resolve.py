"""Find and load a biLM from whatever the user points at: a native directory, a bilm-tf/AllenNLP
directory or HDF5 file, or the name of a model shipped in the package ("" is the shipped default).

`resolve_model` is the one place that turns such a path into files, and `load_model` loads them with
every check: each array's shape and values (`arrays.py`), a native file's recorded digest, and the digest
a user pinned. `load_model` also says what was loaded, by content: each model has ONE digest (`sha256`),
which `spacy elmo verify` prints, a pin is checked against (`digest.check_pin`) and `embed` outputs are
bound to. It covers everything the model is made of:
- native: the digest recorded in model.msgpack (over the options, the vocabulary, the character and word
  vocabularies, every array and the source it was converted from), checked against its contents;
  options.json beside it is a readable copy, checked against the stored options;
- bilm-tf/AllenNLP (a directory, an .hdf5 file, a .zip archive): `digest.model_digest` over options.json,
  the .hdf5 file and, when there is one, vocab.txt, by role ("options", "weights", "vocab"): the same
  for the directory, the .hdf5 file with its options and the archive of them;
- ELMoForManyLangs: `digest.model_digest` over its files by name (config.json and the other .json files,
  char.dic, word.dic, token_embedder.pkl, encoder.pkl, and an architecture JSON read from elsewhere).
Each file's own SHA-256 is in `LoadedModel.files`. Every error names the path and says what was expected.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ..bilm.bilm import BiLM
from .archive import ArchiveModel, find_model, is_archive, member_names
from .digest import ModelFile, check_pin, file_sha256, model_digest, parse_pin
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
    """A biLM and what it was loaded from: `sha256` is the model's one digest (see the module docstring),
    `sha256_of` says what it covers, `files` are the files the model is made of, each with its own SHA-256."""

    bilm: BiLM
    source: ModelSource
    sha256: str
    sha256_of: str
    files: tuple[ModelFile, ...] = ()
    converted_from: Optional[dict[str, Any]] = None

    @property
    def content_sha256(self) -> str:
        """The model digest under the name `embed` outputs record it by: one model, one digest."""
        return self.sha256

    def describe(self) -> dict[str, Any]:
        """What an output records of its model."""
        return {
            "path": str(self.source.path),
            "format": self.source.kind,
            "sha256": self.sha256,
            "content_sha256": self.content_sha256,
        }

    def provenance(self) -> dict[str, str]:
        """What a model converted from this one records of it: its format, the file that holds its weights
        and that file's own SHA-256 (for a model that is a directory of files, ELMoForManyLangs', the
        directory and the model digest)."""
        if self.source.kind == "efml":
            return {"format": self.source.kind, "file": self.source.path.name, "sha256": self.sha256}
        if self.source.kind == "native":  # its recorded digest, which converted models have always named
            return {"format": self.source.kind, "file": self.source.weight_file.name, "sha256": self.sha256}
        weights = next(file for file in self.files if file.role == "weights")
        return {"format": self.source.kind, "file": self.source.weight_file.name, "sha256": weights.sha256}


def load_model(
    path: PathLike,
    options_file: Optional[PathLike] = None,
    option: str = "",
    sha256: Optional[str] = None,
    sha256_option: str = "--sha256",
) -> LoadedModel:
    """Load a biLM from anything `resolve_model` accepts, with every check; `sha256` pins its digest (the
    model's, which `spacy elmo verify` prints), checked before the weights of a bilm-tf model are read."""
    parse_pin(sha256, sha256_option)  # a malformed pin is refused before any file is read
    source = resolve_model(path, options_file, option)
    what = str(source.path)
    if source.kind == "native":
        native = inspect_native(source.path)
        files = [ModelFile("model", str(source.weight_file), native.file_sha256)]
        if source.options_file.is_file():  # a readable copy of the stored options, checked against them
            files.append(ModelFile("options", str(source.options_file), file_sha256(source.options_file)))
        check_pin(native.sha256, sha256, what, sha256_option, files)
        return LoadedModel(
            native.bilm, source, native.sha256, "recorded in the file and checked", tuple(files), native.converted_from
        )
    if source.kind == "efml":
        bilm, files = _read_efml(source)
        digest = model_digest(files)
        check_pin(digest, sha256, what, sha256_option, files)
        return LoadedModel(bilm, source, digest, _covering(files), tuple(files))
    files = _bilm_tf_files(source)
    digest = model_digest(files)
    check_pin(digest, sha256, what, sha256_option, files)  # before the weights are parsed
    if source.archive is not None:
        bilm = source.archive.load()
    else:
        bilm = load_bilm_tf(source.options_file, source.weight_file, source.vocab_file)
    return LoadedModel(bilm, source, digest, _covering(files), tuple(files))


def _covering(files: list[ModelFile]) -> str:
    """What a model digest covers, in words."""
    return "the model digest, over " + ", ".join(Path(file.path).name for file in files)


def _bilm_tf_files(source: ModelSource) -> list[ModelFile]:
    """The files of a bilm-tf model, by role: options.json, the HDF5 weights and, when there is one, the
    vocabulary (the softmax's words); the members' bytes for a model in a zip archive, so the archive and
    the unzipped directory have one digest."""
    if source.archive is not None:
        members = source.archive
        roles = [("options", members.options), ("weights", members.weights), ("vocab", members.vocab)]
        return [ModelFile(role, members.name(name), members.sha256(name)) for role, name in roles if name]
    for what, file in (("weight", source.weight_file), ("options", source.options_file)):
        if not file.is_file():
            raise FileNotFoundError(f"{what} file not found: {file}")
    paths = [("options", source.options_file), ("weights", source.weight_file), ("vocab", source.vocab_file)]
    return [ModelFile(role, str(file), file_sha256(file)) for role, file in paths if file is not None]


def _read_efml(source: ModelSource) -> tuple[BiLM, list[ModelFile]]:
    """An ELMoForManyLangs model and its files, by name: its .dic, .pkl and .json files (a directory, or the
    archive's folder, the same names either way) and any other file reading it took (an architecture JSON
    that config.json names elsewhere), each hashed from the very bytes that were read."""
    if source.efml_prefix is None:
        base = EfmlFiles.directory(source.path)
        names = [p.name for p in sorted(source.path.iterdir()) if p.is_file() and _efml_file(p.name)]
    else:
        base = EfmlFiles.archive(source.path, source.efml_prefix)
        _, inside = member_names(source.path)
        names = sorted(name for name in inside if "/" not in name and _efml_file(name))
    digests: dict[str, str] = {}

    def read(name: str) -> bytes:
        data = base.read(name)
        digests[name] = hashlib.sha256(data).hexdigest()
        return data

    bilm = read_efml(EfmlFiles(base.name, read))
    for name in names:
        if name not in digests:
            read(name)
    return bilm, [ModelFile(name, base.where(name), digests[name]) for name in sorted(digests)]


def _efml_file(name: str) -> bool:
    return name in EFML_FILES or name.endswith(".json")


def load_bilm(
    path: PathLike, options_file: Optional[PathLike] = None, option: str = "", sha256: Optional[str] = None
) -> BiLM:
    """Load a biLM from anything `resolve_model` accepts (`load_model` without the description)."""
    return load_model(path, options_file, option, sha256).bilm
