"""Find and load a biLM from whatever the user points at: a native directory, a bilm-tf/AllenNLP directory
or HDF5 file, an NLPL .zip archive, an ELMoForManyLangs directory or archive, a published or shipped model's
name ("" is the shipped default). `resolve_model` makes it a container (`files.ModelFiles`) and asks each of
`FORMATS` in turn whether it holds that format's model (`formats.Format`); `load_model`, the one public
loader, reads it with every check.

Each model has ONE digest (`LoadedModel.sha256`), which `spacy elmo verify` prints, a pin is checked against
and `embed` outputs are bound to. For a native model it is the digest recorded in (and checked against)
model.msgpack; otherwise `digest.model_digest` over exactly the files loading read, by role, so a directory
and an archive of it have one digest.
"""

import mmap
from pathlib import Path
from typing import Optional

from ..disk import PathLike, same_file
from ..errors import SettingError
from ..hub.download import path_exists, resolve_model_source
from .archive import member_names
from .digest import check_pin, model_digest, parse_pin
from .efml import EFML
from .files import ModelFiles, starts_as_hdf5
from .formats import Container, Format, LoadedModel, ModelSource
from .hdf5 import BILM_TF
from .native import NATIVE, is_native
from .onnx_graph import is_model_proto, names_onnx_graph
from .tfhub import TFHUB

SHIPPED_MODELS_DIR = Path(__file__).parent.parent / "models"
DEFAULT_MODEL = "en_elmo_small"
EXPECTED = (
    "a native model directory, a bilm-tf/AllenNLP directory (options.json + one .hdf5 [+ vocab.txt]), an "
    ".hdf5 weight file with options.json beside it, a .zip archive of such a model (the NLPL repository's), "
    "an ELMoForManyLangs directory (config.json, char.dic, token_embedder.pkl, encoder.pkl), a TF-Hub ELMo "
    "module's folder or tarball (Google's elmo, DeepPavlov's; variables/ beside saved_model.pb), a published "
    "model's name (spacy elmo models lists them: allennlp/original, efml/ru) or an http(s) URL of a model"
)
# Tried in this order; bilm-tf last, as it takes what no other format does, or says what it lacks.
FORMATS: list[Format] = [TFHUB, EFML, NATIVE, BILM_TF]


def shipped_model_path() -> Path:
    return SHIPPED_MODELS_DIR / DEFAULT_MODEL


def available_models() -> list[str]:
    return sorted(p.name for p in SHIPPED_MODELS_DIR.glob("*") if is_native(p))  # none if the folder is absent


def model_location(path: PathLike) -> Path:
    """Where the model `path` names is: the shipped default for "", a name's or URL's local copy (downloaded
    once into the cache), a shipped model's folder by its name, else the path itself, which must exist."""
    if str(path) == "":
        target = shipped_model_path()
        if not is_native(target):
            raise FileNotFoundError(
                f"the default biLM '{DEFAULT_MODEL}' is not installed (expected a native model directory at "
                f"{target}). Give a model explicitly: {EXPECTED}"
            )
        return target
    target = resolve_model_source(path)  # a name or URL: its local copy, downloaded once into the cache
    if not path_exists(target) and path_exists(SHIPPED_MODELS_DIR / str(path)):
        target = SHIPPED_MODELS_DIR / str(path)
    if not path_exists(target):
        shipped = ", ".join(available_models()) or "none installed"
        shown = str(path) if len(str(path)) <= 300 else f"{str(path)[:150]}...({len(str(path))} characters)"
        raise FileNotFoundError(
            f"biLM path {shown!r} does not exist. Give {EXPECTED}, or a shipped model name ({shipped})"
        )
    return target


def resolve_model(path: PathLike, options_file: Optional[PathLike] = None) -> ModelSource:
    """The files behind `path`, and which format's model they hold."""
    target = model_location(path)
    if target.is_file() and is_onnx_graph(target):
        raise ValueError(
            f"{target} is an ONNX graph (spacy elmo export's output): serve it with runtime onnxruntime "
            '(embed --runtime onnxruntime; the pipe\'s runtime = "onnxruntime"); convert/verify/evaluate/export '
            "need the model it was exported from"
        )
    files, members = ModelFiles(target), dict[str, str]()
    if target.is_file() and target.suffix.lower() == ".zip":
        prefix, members = member_names(target)
        files = ModelFiles(target, prefix)
    container = Container(target, files, members, Path(options_file) if options_file else None)
    for model_format in FORMATS:
        source = model_format.recognise(container)
        if source is not None:
            return source
    raise FileNotFoundError(f"{target}: holds no model of a known format. Give {EXPECTED}")


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


def check_output(loaded: LoadedModel, output: Path, directory: bool) -> None:
    """Refuse, before anything is written, an output that is (or, for a `directory`, holds) a file of the
    model being read, or a file output that is a directory (a `SettingError` of setting "output")."""
    if not directory and output.is_dir():
        raise SettingError(f"{output} is a directory: give the file to write", "output")
    for path in loaded.paths():
        if same_file(output, path):
            raise SettingError(
                f"{output} is a file of the model being read ({path}): writing it would destroy the "
                "model; give another output",
                "output",
            )
        if directory and same_file(output, path.parent):
            raise SettingError(
                f"{output} holds {path}, a file of the model being read: what is written there would "
                "replace it or sit beside it as a second model; give another directory",
                "output",
            )


def load_model(path: PathLike, sha256: Optional[str] = None, *, options_file: Optional[PathLike] = None) -> LoadedModel:
    """Load a biLM from anything `resolve_model` accepts, with every check; `sha256` pins its digest (the
    model's, which `spacy elmo verify` prints), checked before the weights of a bilm-tf model are read.
    Refusals name the file; the caller names its settings (`errors.named_settings`: `path`, `sha256`)."""
    parse_pin(sha256)  # a malformed pin is refused before any file is read
    source = resolve_model(path, options_file)
    files = source.format.model_files(source)
    if files:  # checked before the weights are parsed: reading makes its digest of these files (`digested`)
        check_pin(model_digest(files), sha256, str(source.path), files)
    loaded = source.format.read(source, files)
    if not files:  # a digest that only reading finds
        check_pin(loaded.sha256, sha256, str(source.path), loaded.files)
    return loaded
