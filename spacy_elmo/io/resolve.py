"""Find and load a biLM from whatever the user points at: a native directory, a bilm-tf/AllenNLP directory
or HDF5 file, an NLPL .zip archive, an ELMoForManyLangs directory or archive, a published or shipped model's
name ("" is the shipped default). `resolve_model` makes it a container (`files.ModelFiles`) and a format;
`load_model`, the one public loader, reads it with every check.

Each model has ONE digest (`LoadedModel.sha256`), which `spacy elmo verify` prints, a pin is checked against
and `embed` outputs are bound to. For a native model it is the digest recorded in (and checked against)
model.msgpack; otherwise `digest.model_digest` over exactly the files loading read, by role, so a directory
and an archive of it have one digest.
"""

import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..bilm.bilm import BiLM
from ..bilm.options import BiLMOptions
from ..disk import OPTIONS_FILE, PathLike, same_file
from ..hub.download import path_exists, resolve_model_source
from .archive import VOCAB_MEMBER, WEIGHT_MEMBERS, bilm_tf_weights, member_names
from .digest import ModelFile, check_pin, model_digest, parse_pin
from .efml import CONFIG_FILE, ENCODER_FILE, MODEL_FILES, _read_efml
from .files import ModelFiles, starts_as_hdf5
from .hdf5 import _read_bilm_tf, weights_limit
from .native import MODEL_FILE, _read_native, is_native
from .onnx_graph import is_model_proto, names_onnx_graph

SHIPPED_MODELS_DIR = Path(__file__).parent.parent / "models"
DEFAULT_MODEL = "en_elmo_small"
EXPECTED = (
    "a native model directory, a bilm-tf/AllenNLP directory (options.json + one .hdf5 [+ vocab.txt]), an "
    ".hdf5 weight file with options.json beside it, a .zip archive of such a model (the NLPL repository's), "
    "an ELMoForManyLangs directory (config.json, char.dic, token_embedder.pkl, encoder.pkl), a published "
    "model's name (spacy elmo models lists them: allennlp/original, efml/ru) or an http(s) URL of a model"
)


@dataclass(frozen=True)
class ModelSource:
    """One model: its format (`kind`: "native", "bilm-tf" or "efml"), its container, and the names there of
    its options, weights and vocabulary; `path` is what the user gave."""

    kind: str
    path: Path
    files: ModelFiles
    options: str
    weights: str
    vocab: Optional[str] = None

    @property
    def options_file(self) -> Path:
        return Path(self.files.where(self.options))

    @property
    def weight_file(self) -> Path:
        return Path(self.files.where(self.weights))


def shipped_model_path() -> Path:
    return SHIPPED_MODELS_DIR / DEFAULT_MODEL


def available_models() -> list[str]:
    return sorted(p.name for p in SHIPPED_MODELS_DIR.glob("*") if is_native(p))  # none if the folder is absent


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
        target = resolve_model_source(path)  # a name or URL: its local copy, downloaded once into the cache
        if not path_exists(target) and path_exists(SHIPPED_MODELS_DIR / str(path)):
            target = SHIPPED_MODELS_DIR / str(path)
        if not path_exists(target):
            shipped = ", ".join(available_models()) or "none installed"
            shown = str(path) if len(str(path)) <= 300 else f"{str(path)[:150]}...({len(str(path))} characters)"
            raise FileNotFoundError(
                f"biLM path {shown!r} does not exist{where}. Give {EXPECTED}, or a shipped model name ({shipped})"
            )
    if target.is_file() and is_onnx_graph(target):
        raise ValueError(
            f"{target}{where} is an ONNX graph (spacy elmo export's output): serve it with runtime onnxruntime "
            '(embed --runtime onnxruntime; the pipe\'s runtime = "onnxruntime"); convert/verify/evaluate/export '
            "need the model it was exported from"
        )
    if target.is_file() and target.suffix.lower() == ".zip":
        prefix, inside = member_names(target, where)
        files = ModelFiles(target, prefix)
        if all(name in inside for name in MODEL_FILES):  # an ELMoForManyLangs model, zipped
            return ModelSource("efml", target, files, CONFIG_FILE, ENCODER_FILE)
        weights = bilm_tf_weights(target, inside, where)
        return ModelSource(
            "bilm-tf", target, files, OPTIONS_FILE, weights, VOCAB_MEMBER if VOCAB_MEMBER in inside else None
        )
    if target.is_dir() and all((target / name).exists() for name in MODEL_FILES):  # ELMoForManyLangs
        return ModelSource("efml", target, ModelFiles(target), CONFIG_FILE, ENCODER_FILE)
    weight_file = target  # or, in a directory, the one weight file there
    if target.is_dir():
        if is_native(target):
            return ModelSource("native", target, ModelFiles(target), OPTIONS_FILE, MODEL_FILE)
        found = [target / n for n in WEIGHT_MEMBERS if (target / n).exists()]
        if len(found) > 1:
            raise ValueError(
                f"{target}{where}: holds {len(found)} weight files ({', '.join(p.name for p in found)}); which "
                f"one is the model's cannot be chosen: give the .hdf5 file you mean (e.g. {found[0]}; the "
                f"{OPTIONS_FILE} beside it is read)"
            )
        found = found or sorted(target.glob("*.hdf5")) + sorted(target.glob("*.h5"))
        if len(found) != 1:
            raise FileNotFoundError(
                f"{target}{where}: expected a native model ({MODEL_FILE}), a weight file named one of "
                f"{WEIGHT_MEMBERS}, or exactly one .hdf5 file beside options.json; found {len(found)}"
            )
        weight_file = found[0]
    options = Path(options_file) if options_file else weight_file.with_name(OPTIONS_FILE)
    vocab = weight_file.with_name(VOCAB_MEMBER)
    files = ModelFiles(Path())  # each file named by its path as given
    return ModelSource("bilm-tf", target, files, str(options), str(weight_file), str(vocab) if vocab.exists() else None)


def is_onnx_graph(path: Path) -> bool:
    """Whether a file is an ONNX graph: not HDF5, and named .onnx or a ModelProto (read memory-mapped)."""
    if starts_as_hdf5(path):
        return False
    if names_onnx_graph(str(path)):
        return True
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return is_model_proto(memoryview(mapped))
    except (OSError, BufferError, ValueError):  # ValueError: an empty file, which mmap refuses
        return False


@dataclass(frozen=True)
class LoadedModel:
    """A biLM and what it was loaded from: `sha256` is the model's one digest, `sha256_of` what it covers,
    `files` the files it is made of, each with its own SHA-256."""

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
        """What a model converted from this one records of it: its format, weight file and that file's SHA-256
        (ELMoForManyLangs: the directory and the model digest)."""
        kind, sha256 = self.source.kind, self.sha256
        if kind == "bilm-tf":
            sha256 = next(file.sha256 for file in self.files if file.role == "weights")
        name = self.source.path.name if kind == "efml" else self.source.weight_file.name
        return {"format": kind, "file": name, "sha256": sha256}

    def paths(self) -> tuple[Path, ...]:
        """The files on disk the model was read from (the archive, for a zipped model)."""
        if self.source.files.zipped:
            return (self.source.path,)
        return tuple(Path(file.path) for file in self.files)


def check_output(loaded: LoadedModel, output: Path, option: str, directory: bool) -> None:
    """Refuse, before anything is written, an output that is (or, for a `directory`, holds) a file of the
    model being read, or a file output that is a directory."""
    if not directory and output.is_dir():
        raise ValueError(f"{output} ({option}) is a directory: give the file to write")
    for path in loaded.paths():
        if same_file(output, path):
            raise ValueError(
                f"{output} ({option}) is a file of the model being read ({path}): writing it would destroy the "
                "model; give another output"
            )
        if directory and same_file(output, path.parent):
            raise ValueError(
                f"{output} ({option}) holds {path}, a file of the model being read: what is written there would "
                "replace it or sit beside it as a second model; give another directory"
            )


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
    what, files, converted_from = str(source.path), source.files, None
    if source.kind == "native":
        bilm, digest, converted_from = _read_native(files)
        model_files = _read(files, {"model": MODEL_FILE, "options": OPTIONS_FILE})
    elif source.kind == "efml":
        bilm = _read_efml(files)
        model_files = _read(files, {name: name for name in files.digests})
        digest = model_digest(model_files)
    else:
        model_files = _bilm_tf_files(source)
        digest = model_digest(model_files)
        check_pin(digest, sha256, what, sha256_option, model_files)  # before the weights are parsed
        bilm = _read_bilm_tf(files, source.options, source.weights, source.vocab)
    check_pin(digest, sha256, what, sha256_option, model_files)
    if source.kind == "native":
        sha256_of = (
            "recorded in the file and checked; it covers the options, vocabularies and arrays as stored (dtype "
            "included) and the record of what the model was converted from: a converted copy has its own digest"
        )
    else:
        sha256_of = "the model digest, over " + ", ".join(Path(file.path).name for file in model_files)
    return LoadedModel(bilm, source, digest, sha256_of, tuple(model_files), converted_from)


def _read(files: ModelFiles, roles: dict[str, str]) -> list[ModelFile]:
    """The files that reading the model read, by role (sorted), each with the SHA-256 of the very bytes read."""
    return [
        ModelFile(role, files.where(roles[role]), files.digests[roles[role]])
        for role in sorted(roles)
        if roles[role] in files.digests
    ]


def _bilm_tf_files(source: ModelSource) -> list[ModelFile]:
    """The files of a bilm-tf model by role, each hashed as stored (in an archive, the weights within what
    the options describe)."""
    files = source.files
    limit = None
    if files.zipped:
        options = BiLMOptions.from_bytes(files.read(source.options), files.where(source.options))
        limit = weights_limit(options, source.options)
    roles = [("options", source.options, None), ("weights", source.weights, limit), ("vocab", source.vocab, None)]
    return [ModelFile(role, files.where(name), files.sha256(name, limit)) for role, name, limit in roles if name]
