"""Getting a trained biLM out: from a checkpoint, and compactly for shipping inside the package.

Export to the bilm-tf/AllenNLP layout is `spacy_elmo.convert.save_bilm_tf` (softmax and vocabulary
included); this module adds what shipping needs: the native format with the softmax stored as
float16 (it is only used for perplexity and fine-tuning, and it is the largest array of a small
model), which `load_native` reads back into float32 parameters.
"""
import json
from pathlib import Path
from typing import Union

import numpy
import srsly

from ..bilm.bilm import BiLM
from ..bilm.serialize import FORMAT, MODEL_FILE, OPTIONS_FILE, bilm_from_bytes, encode_array
from ..convert import bilm_arrays
from .checkpoint import read_checkpoint

SOFTMAX_ARRAYS = ("softmax/W", "softmax/b")


def model_from_checkpoint(path: Union[str, Path]) -> BiLM:
    """The biLM (with softmax and vocabulary) stored in a training checkpoint."""
    return bilm_from_bytes(read_checkpoint(Path(path))["model"], source=str(path))


def save_native_compact(bilm: BiLM, directory: Union[str, Path], softmax_dtype: str = "float16", keep_softmax: bool = True) -> Path:
    """Like `save_native`, with the softmax stored as `softmax_dtype` (or left out)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = {}
    for name, value in bilm_arrays(bilm):
        if name in SOFTMAX_ARRAYS:
            if not keep_softmax:
                continue
            value = value.astype(numpy.dtype(softmax_dtype))
        weights[name] = encode_array(value)
    options = bilm.options.to_dict()
    if not keep_softmax:
        options.pop("n_tokens_vocab", None)
    payload = {"format": FORMAT, "options": options, "weights": weights, "vocab": bilm.vocab if keep_softmax else None}
    tmp = directory / (MODEL_FILE + ".tmp")
    tmp.write_bytes(srsly.msgpack_dumps(payload))
    tmp.replace(directory / MODEL_FILE)
    (directory / OPTIONS_FILE).write_text(json.dumps(options, indent=2) + "\n", encoding="utf-8")
    return directory
