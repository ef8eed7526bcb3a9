"""Find and load a biLM from whatever the user points at: a native directory, a bilm-tf/AllenNLP
directory or HDF5 file, or the name of a model shipped in the package ("" is the shipped default).

`resolve_model` is the one place that turns such a path into files, and `load_bilm` loads them.
Every error names the path and says what was expected there.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ..bilm.bilm import BiLM
from .hdf5 import load_bilm_tf
from .native import MODEL_FILE, OPTIONS_FILE, is_native, load_native

PathLike = Union[str, Path]
SHIPPED_MODELS_DIR = Path(__file__).parent.parent / "models"
DEFAULT_MODEL = "en_elmo_small"
WEIGHT_FILE_NAMES = ("weights.hdf5", "lm_weights.hdf5")
EXPECTED = (
    "a native model directory, a bilm-tf/AllenNLP directory (options.json + one .hdf5 [+ vocab.txt]) or an "
    ".hdf5 weight file with options.json beside it"
)


@dataclass(frozen=True)
class ModelSource:
    """The files of one model. `kind` is "native" (model.msgpack) or "bilm-tf" (HDF5)."""

    kind: str
    path: Path
    options_file: Path
    weight_file: Path
    vocab_file: Optional[Path] = None


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


def load_bilm(path: PathLike, options_file: Optional[PathLike] = None, option: str = "") -> BiLM:
    """Load a biLM from anything `resolve_model` accepts."""
    source = resolve_model(path, options_file, option)
    if source.kind == "native":
        return load_native(source.path)
    return load_bilm_tf(source.options_file, source.weight_file, source.vocab_file)
