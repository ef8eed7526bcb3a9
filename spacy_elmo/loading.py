"""Find and load a biLM from whatever the user points at: a native directory, a bilm-tf/AllenNLP
directory or HDF5 file, or the name of a model shipped in the package."""
from pathlib import Path
from typing import Optional, Union

from .bilm.bilm import BiLM
from .bilm.serialize import is_native, load_native
from .convert import load_bilm_tf

SHIPPED_MODELS_DIR = Path(__file__).parent / "models"
DEFAULT_MODEL = "en_elmo_small"
WEIGHT_FILE_NAMES = ("weights.hdf5", "lm_weights.hdf5")


def shipped_model_path(name: str = DEFAULT_MODEL) -> Path:
    return SHIPPED_MODELS_DIR / name


def load_bilm(path: Union[str, Path], options_file: Optional[Union[str, Path]] = None) -> BiLM:
    """Load a biLM from a native model directory, a bilm-tf/AllenNLP directory (options.json + one
    .hdf5 [+ vocab.txt]), an .hdf5 file (options.json beside it or `options_file`), or a shipped name."""
    path = Path(path)
    if not path.exists() and (SHIPPED_MODELS_DIR / str(path)).exists():
        path = SHIPPED_MODELS_DIR / str(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no biLM at {path}: give a native model directory, a bilm-tf/AllenNLP directory or .hdf5 "
            f"file, or a shipped model name ({', '.join(available_models()) or 'none installed'})"
        )
    if path.is_dir():
        if is_native(path):
            return load_native(path)
        weights = [path / n for n in WEIGHT_FILE_NAMES if (path / n).exists()][:1]
        weights = weights or sorted(path.glob("*.hdf5")) + sorted(path.glob("*.h5"))
        if len(weights) != 1:
            raise FileNotFoundError(
                f"{path}: expected a native model (model.msgpack), a weight file named one of "
                f"{WEIGHT_FILE_NAMES}, or exactly one .hdf5 file beside options.json; found {len(weights)}"
            )
        weight_file = weights[0]
        options = Path(options_file) if options_file else path / "options.json"
    else:
        weight_file = path
        options = Path(options_file) if options_file else path.with_name("options.json")
    vocab = weight_file.with_name("vocab.txt")
    return load_bilm_tf(options, weight_file, vocab if vocab.exists() else None)


def available_models() -> list:
    if not SHIPPED_MODELS_DIR.exists():
        return []
    return sorted(p.name for p in SHIPPED_MODELS_DIR.iterdir() if is_native(p))
