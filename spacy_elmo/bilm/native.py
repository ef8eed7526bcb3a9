"""The native model format: options + weights + vocabulary in one msgpack blob, never pickle.

Arrays are written as (dtype, shape, raw bytes) and read back with `numpy.frombuffer` under a short
list of allowed dtypes, so loading a file cannot execute code. Weight names and orientations are
those of the bilm-tf layout (see `convert.py`), so the two formats hold the very same arrays.
A native model on disk is a directory: `options.json` (readable) and `model.msgpack`.
"""
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy
import srsly

from ..convert import WeightsError, bilm_arrays, build_bilm
from .bilm import BiLM
from .config import BiLMOptions

FORMAT = "spacy-elmo.bilm.v1"
ALLOWED_DTYPES = ("float32", "float16", "int32", "int64")
MODEL_FILE = "model.msgpack"
OPTIONS_FILE = "options.json"


def encode_array(array: numpy.ndarray) -> Dict[str, Any]:
    array = numpy.ascontiguousarray(array)
    if array.dtype.name not in ALLOWED_DTYPES:
        raise TypeError(f"cannot store dtype {array.dtype}; allowed: {ALLOWED_DTYPES}")
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.tobytes()}


def decode_array(value: Dict[str, Any], name: str = "array", source: str = "model") -> numpy.ndarray:
    try:
        dtype, shape, data = value["dtype"], tuple(value["shape"]), value["data"]
    except (KeyError, TypeError):
        raise WeightsError(f"{source}: entry '{name}' is not an encoded array") from None
    if dtype not in ALLOWED_DTYPES:
        raise WeightsError(f"{source}: entry '{name}' has dtype {dtype!r}; allowed: {ALLOWED_DTYPES}")
    expected = int(numpy.prod(shape)) * numpy.dtype(dtype).itemsize
    if not isinstance(data, bytes) or len(data) != expected:
        raise WeightsError(f"{source}: entry '{name}' holds {len(data)} bytes, expected {expected} for shape {shape}")
    return numpy.frombuffer(data, dtype=dtype).reshape(shape).copy()


def bilm_to_bytes(bilm: BiLM) -> bytes:
    payload = {
        "format": FORMAT,
        "options": bilm.options.to_dict(),
        "weights": {name: encode_array(value) for name, value in bilm_arrays(bilm)},
        "vocab": bilm.vocab,
    }
    return srsly.msgpack_dumps(payload)


def bilm_from_bytes(data: bytes, source: str = "model bytes") -> BiLM:
    try:
        payload = srsly.msgpack_loads(data, use_list=True)
    except Exception as err:  # msgpack raises several unrelated types on corrupt input
        raise WeightsError(f"{source}: not a spacy-elmo model ({type(err).__name__}: {err})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise WeightsError(f"{source}: not a spacy-elmo model (expected format {FORMAT!r})")
    options = BiLMOptions.from_dict(payload["options"], source=source)
    arrays = {name: decode_array(value, name, source) for name, value in payload["weights"].items()}
    vocab: Optional[List[str]] = payload.get("vocab")
    return build_bilm(options, arrays, source=source, vocab=vocab)


def save_native(bilm: BiLM, directory: Union[str, Path]) -> Path:
    """Write a native model directory atomically (temporary file, then rename)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (MODEL_FILE + ".tmp")
    tmp.write_bytes(bilm_to_bytes(bilm))
    tmp.replace(directory / MODEL_FILE)
    (directory / OPTIONS_FILE).write_text(json.dumps(bilm.options.to_dict(), indent=2) + "\n", encoding="utf-8")
    return directory


def load_native(directory: Union[str, Path]) -> BiLM:
    directory = Path(directory)
    path = directory / MODEL_FILE
    if not path.exists():
        raise FileNotFoundError(f"no native spacy-elmo model at {directory} (missing {MODEL_FILE})")
    return bilm_from_bytes(path.read_bytes(), source=str(path))


def is_native(path: Union[str, Path]) -> bool:
    return (Path(path) / MODEL_FILE).exists()
