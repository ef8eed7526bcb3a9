"""The native model format: options, vocabularies and bilm-tf-layout arrays (dtype, shape, raw bytes, a
short list of dtypes) in one msgpack blob, never pickle, with a SHA-256 of everything stored that is checked
on load. On disk: a directory of `model.msgpack` and `options.json` (a readable copy).
"""

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

import numpy
import srsly

from ..bilm.bilm import BiLM
from ..bilm.lexicon import read_lexicon
from ..bilm.options import BiLMOptions
from ..dicts import changed_keys
from ..disk import OPTIONS_FILE, PathLike, atomic_write_bytes, atomic_write_text
from ..errors import reading
from .arrays import SOFTMAX_ARRAYS, WeightsError, bilm_arrays, build_bilm
from .digest import ModelFile
from .files import ModelFiles
from .formats import Container, Format, LoadedModel, ModelSource

FORMAT = "spacy-elmo.bilm.v1"
REWRITE = "copy or export the model again"
ALLOWED_DTYPES = ("float32", "float16", "int32", "int64")
MODEL_FILE = "model.msgpack"
DIGEST_KEY = "sha256"
SOURCE_KEY = "converted_from"
LEXICON_KEY = "lexicon"
RECORDED = (
    "recorded in the file and checked; it covers the options, vocabularies and arrays as stored (dtype included) "
    "and the record of what the model was converted from: a converted copy has its own digest"
)


def encode_array(array: numpy.ndarray) -> dict[str, Any]:
    array = numpy.ascontiguousarray(array)
    if array.dtype.name not in ALLOWED_DTYPES:
        raise TypeError(f"cannot store dtype {array.dtype}; allowed: {ALLOWED_DTYPES}")
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.tobytes()}


def decode_array(value: dict[str, Any], name: str = "array") -> numpy.ndarray:
    try:
        dtype, shape, data = value["dtype"], tuple(value["shape"]), value["data"]
    except (KeyError, TypeError):
        raise WeightsError(f"entry '{name}' is not an encoded array") from None
    if dtype not in ALLOWED_DTYPES:
        raise WeightsError(f"entry '{name}' has dtype {dtype!r}; allowed: {ALLOWED_DTYPES}")
    expected = int(numpy.prod(shape)) * numpy.dtype(dtype).itemsize
    if not isinstance(data, bytes) or len(data) != expected:
        raise WeightsError(f"entry '{name}' holds {len(data)} bytes, expected {expected} for shape {shape}")
    return numpy.frombuffer(data, dtype=dtype).reshape(shape).copy()


def payload_digest(
    options: dict[str, Any],
    weights: dict[str, dict[str, Any]],
    vocab: Optional[list[str]],
    converted_from: Optional[dict[str, Any]] = None,
    lexicon: Optional[dict[str, Any]] = None,
) -> str:
    """SHA-256 of everything a model file stores."""
    digest = hashlib.sha256()
    for key, value, ascii_only in ((SOURCE_KEY, converted_from, True), (LEXICON_KEY, lexicon, False)):
        if value is not None:  # each only when stored (a byte lexicon is stored as none)
            text = json.dumps({key: value}, sort_keys=True, ensure_ascii=ascii_only)
            digest.update(text.encode("utf-8", "surrogatepass"))
    digest.update(json.dumps(options, sort_keys=True).encode("utf-8"))
    digest.update(json.dumps(vocab, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    for name in sorted(weights):
        entry = weights[name]
        header = json.dumps([name, entry.get("dtype"), entry.get("shape")])
        digest.update(header.encode("utf-8"))
        data = entry.get("data")
        digest.update(data if isinstance(data, bytes) else b"")
    return digest.hexdigest()


def bilm_to_bytes(
    bilm: BiLM,
    softmax_dtype: str = "float32",
    keep_softmax: bool = True,
    converted_from: Optional[dict[str, Any]] = None,
) -> bytes:
    """The model file's bytes. `softmax_dtype="float16"` halves the language-model head (only perplexity and
    fine-tuning use it); `keep_softmax=False` drops it and the vocabulary; `converted_from`: the source."""
    weights = {}
    for name, value in bilm_arrays(bilm):
        if name not in SOFTMAX_ARRAYS:
            weights[name] = encode_array(value)
        elif keep_softmax:
            weights[name] = encode_array(value.astype(numpy.dtype(softmax_dtype)))
    options = {key: value for key, value in bilm.options.to_dict().items() if keep_softmax or key != "n_tokens_vocab"}
    vocab = bilm.vocab if keep_softmax else None
    lexicon = bilm.lexicon.to_dict()
    payload = {
        "format": FORMAT,
        "options": options,
        "weights": weights,
        "vocab": vocab,
        DIGEST_KEY: payload_digest(options, weights, vocab, converted_from, lexicon),
    }
    recorded = {SOURCE_KEY: converted_from, LEXICON_KEY: lexicon}  # each only when there is one
    payload.update((key, value) for key, value in recorded.items() if value is not None)
    return srsly.msgpack_dumps(payload)


def _checked_payload(data: bytes) -> dict[str, Any]:
    """The file's contents, its format and (when it records one) its digest checked."""
    try:
        payload = srsly.msgpack_loads(data, use_list=True)
    except Exception as err:  # msgpack raises several unrelated types on corrupt input
        raise WeightsError(f"not a spacy-elmo model ({type(err).__name__}: {err})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise WeightsError(f"not a spacy-elmo model (expected format {FORMAT!r})")
    if not isinstance(payload.get("options"), dict) or not isinstance(payload.get("weights"), dict):
        raise WeightsError("not a spacy-elmo model (no 'options' or 'weights' section)")
    recorded = payload.get(DIGEST_KEY)
    if not isinstance(recorded, str) or len(recorded) != 64:
        raise WeightsError(
            f"the model file records no valid SHA-256 digest ({DIGEST_KEY!r} is {recorded!r}); its "
            f"contents cannot be checked (a damaged file, or one not written by spacy-elmo)"
        )
    converted_from = payload.get(SOURCE_KEY)
    if converted_from is not None and not isinstance(converted_from, dict):
        raise WeightsError(f"the model file is corrupt: {SOURCE_KEY!r} is {converted_from!r}")
    lexicon = payload.get(LEXICON_KEY)
    if not isinstance(lexicon, (dict, type(None))):
        raise WeightsError(f"the model file is corrupt: {LEXICON_KEY!r} is not a mapping")
    actual = payload_digest(payload["options"], payload["weights"], payload.get("vocab"), converted_from, lexicon)
    if actual != recorded:
        raise WeightsError(
            f"the model file is corrupt: its contents have SHA-256 {actual}, but it was written "
            f"with {recorded} (a damaged copy or an edited file)"
        )
    return payload


def _bilm_from_payload(payload: dict[str, Any]) -> BiLM:
    options = BiLMOptions.from_dict(payload["options"])
    arrays = {name: decode_array(value, name) for name, value in payload["weights"].items()}
    lexicon = read_lexicon(payload.get(LEXICON_KEY), options.max_characters_per_token)
    return build_bilm(options, arrays, vocab=payload.get("vocab"), lexicon=lexicon)


def bilm_from_bytes(data: bytes) -> BiLM:
    """A model file's bytes as a BiLM, checked; the caller names them and what to do (`errors.reading`: a
    saved pipeline's weights are saved again, a model file is copied again)."""
    return _bilm_from_payload(_checked_payload(data))


class NativeFormat(Format):
    """model.msgpack, which records its own digest, and options.json, a readable copy checked against it."""

    name = "native"
    checksum = "the digest recorded in the file"

    def recognise(self, container: Container) -> Optional[ModelSource]:
        if not container.files.exists(MODEL_FILE):
            return None
        return ModelSource(self, container.path, container.files, {"model": MODEL_FILE, "options": OPTIONS_FILE})

    def read(self, source: ModelSource, files: list[ModelFile]) -> LoadedModel:
        with reading(source.files.where(MODEL_FILE), REWRITE):
            payload = _checked_payload(source.files.read(MODEL_FILE))
            _check_readable_copy(source.files, payload["options"])
            bilm, read = _bilm_from_payload(payload), tuple(source.read_files())
        return LoadedModel(bilm, source, payload[DIGEST_KEY], RECORDED, read, payload.get(SOURCE_KEY))

    def origin(self, loaded: LoadedModel) -> tuple[str, str]:
        return MODEL_FILE, loaded.sha256


NATIVE = NativeFormat()


def save_native(
    bilm: BiLM,
    directory: PathLike,
    softmax_dtype: str = "float32",
    keep_softmax: bool = True,
    converted_from: Optional[dict[str, Any]] = None,
) -> Path:
    """Write a native model directory (each file atomically, see `spacy_elmo/disk.py`); see `bilm_to_bytes`."""
    directory = Path(directory)
    data = bilm_to_bytes(bilm, softmax_dtype=softmax_dtype, keep_softmax=keep_softmax, converted_from=converted_from)
    atomic_write_bytes(directory / MODEL_FILE, data)
    options = {key: value for key, value in bilm.options.to_dict().items() if keep_softmax or key != "n_tokens_vocab"}
    atomic_write_text(directory / OPTIONS_FILE, json.dumps(options, indent=2) + "\n")
    return directory


def _check_readable_copy(files: ModelFiles, stored: dict[str, Any]) -> None:
    """options.json beside model.msgpack is a copy for people to read; an edited copy would describe a
    model that is not the one loaded, so it is an error rather than silently ignored."""
    if not files.exists(OPTIONS_FILE):
        return
    with reading(files.where(OPTIONS_FILE)):
        try:
            written = json.loads(files.read(OPTIONS_FILE).decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise WeightsError(f"not valid JSON ({err}); it is a copy of the options in {MODEL_FILE}") from None
        if differ := changed_keys(stored, written):
            raise WeightsError(
                f"differs from the options stored in {files.where(MODEL_FILE)} at "
                f"{', '.join(repr(key) for key in differ)}. options.json is a readable copy (the model file is what "
                f"loads): restore it from the model (`spacy elmo verify {files.root}` shows the stored options), "
                "or retrain/convert for new options"
            )


def is_native(path: PathLike) -> bool:
    return (Path(path) / MODEL_FILE).exists()
