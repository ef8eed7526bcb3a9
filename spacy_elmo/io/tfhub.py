"""TF-Hub ELMo modules read without TensorFlow: Google's `elmo` v1-v3 (the English original biLM) and
DeepPavlov's Russian modules (wiki, news, twitter). A module is a folder of `tfhub_module.pb`,
`saved_model.pb` and `variables/` (a TensorFlow checkpoint, read by `tf_bundle`); the graph is not read.

Both hold the variables of bilm-tf's inference graph under `bilm/`, as that graph names them (DeepPavlov's
`elmo2tfhub.py` builds it; Google's names are those the log in github.com/tensorflow/hub/issues/88 lists).
This reads backwards the map bilm-tf's loader applies to its HDF5 datasets (`_pretrained_initializer` in
allenai/bilm-tf `bilm/model.py`, copied into DeepPavlov's `elmo_model.py`):
- `bilm/char_embed` (262, dim) -> `char_embed` without row 0 (the "no token" row bilm-tf's loader prepends;
  261 rows are taken as they are);
- `bilm/CNN/W_cnn_i`, `b_cnn_i`, `bilm/CNN_high_k/{W,b}_{carry,transform}`, `bilm/CNN_proj/{W,b}_proj` -> the
  same names without `bilm/`;
- `bilm/RNN_d/RNN/MultiRNNCell/Celll/rnn/lstm_cell/{kernel, bias, projection/kernel}` -> `.../LSTMCell/{W_0, B,
  W_P_0}` (tf.nn.rnn_cell.LSTMCell's kernel is bilm-tf's W_0: input rows first, gates i, j, f, o).
The dimensions follow from the shapes; what the variables cannot say is taken from the publishers (`FACTS`).

The options record under `tfhub` (so a converted copy keeps it) what a module adds to the biLM: the layout,
the learned layer mix of its `elmo` output, which the biLM does not apply (Google: `aggregation/weights` (3,)
and `aggregation/scaling` (); DeepPavlov: `aggregation/elmo_output_ELMo_W` (3,) and
`aggregation/elmo_output_ELMo_gamma` (1,), from `weight_layers` in elmo_model.py), and the variables not read
(DeepPavlov's carried LSTM states, `bilm/Variable*`: the biLM runs stateless unless asked, and carries its own
state then).
"""

import re
from typing import Any, Optional

import numpy

from ..bilm.options import BiLMOptions
from ..errors import ModelFileError, reading
from .archive import WEIGHTS_LIMIT
from .arrays import RAW_CHARACTERS, build_bilm, lstm_name
from .digest import ModelFile
from .formats import Container, Format, LoadedModel, ModelSource, digested
from .tf_bundle import INDEX_SUFFIX, Buffer, TensorBundle, map_file

MODULE_FILES = ("saved_model.pb", "tfhub_module.pb")  # either marks a folder of variables as a module
VARIABLES = "variables/variables"  # the checkpoint's prefix in a SavedModel
TFHUB_KEY = "tfhub"  # the options' entry that records what the module adds

# What the variables cannot say (the same for both publishers):
# - Google's module is AllenNLP's "Original" biLM ("trained on the 1 Billion Word Benchmark", tfhub.dev/google/
#   elmo/2; 512-wide word_emb, 1024-wide LSTM outputs, 93.6M parameters on allennlp.org/elmo), whose options
#   file (s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway/
#   elmo_2x4096_512_2048cnn_2xhighway_options.json) states these values;
# - DeepPavlov's modules are made by `deeppavlov/models/elmo/elmo2tfhub.py`, whose graph cuts tokens to
#   `_max_word_length = 50` ids and shifts them by +1 (`bos_sen_eos + 1`), with bilm-tf's graph, which
#   requires n_characters 262; DeepPavlov trains from bilm-tf's options (its `configs/elmo/elmo-1b-benchmark.json`
#   downloads the options above), and the Russian models' own options.json is not published beside them:
#   the clips, skip connections and activation are assumed to be those.
FACTS: dict[str, Any] = {
    "activation": "relu",
    "n_characters": 262,
    "max_characters_per_token": 50,
    "cell_clip": 3.0,
    "proj_clip": 3.0,
    "use_skip_connections": True,
}
SOURCES = {
    "google": "tfhub.dev/google/elmo (the 1 Billion Word Benchmark biLM, AllenNLP's 'Original')",
    "deeppavlov": "DeepPavlov's ELMo module (deeppavlov/models/elmo/elmo2tfhub.py)",
}

_BILM = "bilm/"
_LSTM = re.compile(r"^(RNN_\d+/RNN/MultiRNNCell/Cell\d+)/rnn/lstm_cell/(kernel|bias|projection/kernel)$")
_LSTM_LEAVES = {"kernel": "W_0", "bias": "B", "projection/kernel": "W_P_0"}
_STATE = re.compile(r"^bilm/Variable(_\d+)?$")  # DeepPavlov's carried LSTM states (unnamed tf.Variables)
# the layer mix: (layout, scores variable, scale variable); DeepPavlov's names follow `weight_layers(name, ...)`
_MIXES = (
    ("google", re.compile(r"^aggregation/weights$"), "aggregation/scaling"),
    ("deeppavlov", re.compile(r"^aggregation/(.+)_ELMo_W$"), "aggregation/{}_ELMo_gamma"),
)


class TfHubError(ModelFileError):
    """A TF-Hub module that is not an ELMo biLM this reader knows, or whose variables disagree."""


def reference_name(variable: str) -> str:
    """A module's `bilm/...` variable -> its dataset in the bilm-tf/AllenNLP HDF5 layout (`arrays.py`)."""
    name = variable[len(_BILM) :]
    match = _LSTM.match(name)
    return f"{match[1]}/LSTMCell/{_LSTM_LEAVES[match[2]]}" if match else name


def module_folder(container: Container) -> Optional[str]:
    """Where in the container the module is ("" at its root, or "NAME/" for a directory holding one folder, as
    an unpacked tarball may), or None without one."""
    files, prefixes = container.files, [""]
    if not files.zipped and container.path.is_dir():
        entries = list(container.path.iterdir())
        if len(entries) == 1 and entries[0].is_dir():
            prefixes.append(f"{entries[0].name}/")
    for prefix in prefixes:
        if files.exists(prefix + VARIABLES + INDEX_SUFFIX) and any(files.exists(prefix + m) for m in MODULE_FILES):
            return prefix
    return None


class TfHubFormat(Format):
    """A TF-Hub ELMo module: `variables/variables.index` and its data shards beside `saved_model.pb` or
    `tfhub_module.pb`; the pin covers the checkpoint's files (what is read)."""

    name = "tfhub"
    checksum = "every tensor's CRC-32C recorded in the checkpoint"

    def recognise(self, container: Container) -> Optional[ModelSource]:
        folder = module_folder(container)
        if folder is None:
            return None
        return ModelSource(self, container.path, container.files, {"index": folder + VARIABLES + INDEX_SUFFIX})

    def model_files(self, source: ModelSource) -> list[ModelFile]:
        """The index (whose header says how many data shards there are) and each shard, hashed."""
        files, index = source.files, source.roles["index"]
        bundle = _bundle(source)
        listed = [ModelFile("index", files.where(index), files.digests[index])]
        for shard in range(bundle.n_shards):
            name = bundle.shard_file(shard)
            listed.append(ModelFile(f"data-{shard:05d}", files.where(name), files.sha256(name, WEIGHTS_LIMIT)))
        return listed

    def read(self, source: ModelSource, files: list[ModelFile]) -> LoadedModel:
        with _bundle(source) as bundle:  # the load's parse, let go of with it
            options, arrays = read_module(bundle)
        source.parsed.clear()
        with reading(bundle.index_name):
            bilm = build_bilm(options, arrays)
        return digested(bilm, source, files)


TFHUB = TfHubFormat()


def _bundle(source: ModelSource) -> TensorBundle:
    """The module's checkpoint, its index parsed once a load (by `model_files`): its shards memory-mapped in a
    directory, read whole from an archive."""
    if "bundle" not in source.parsed:
        files, index = source.files, source.roles["index"]

        def open_file(name: str) -> Buffer:
            path = files.path(name)
            return files.read(name, WEIGHTS_LIMIT) if path is None else map_file(path)

        prefix = index[: -len(INDEX_SUFFIX)]
        source.parsed["bundle"] = TensorBundle(files.read(index, WEIGHTS_LIMIT), prefix, open_file, files.where)
    return source.parsed["bundle"]


def read_module(bundle: TensorBundle) -> tuple[BiLMOptions, dict[str, numpy.ndarray]]:
    """The options and the reference-layout arrays of the module's biLM, and the `tfhub` record in the options."""
    source = bundle.index_name
    layout, mix_names = _layout(bundle)
    weights, not_read = {}, []
    for variable in sorted(bundle.entries):
        if variable.startswith(_BILM) and not _STATE.match(variable):
            weights[reference_name(variable)] = variable
        elif variable not in mix_names:
            not_read.append(variable)
    for needed in ("char_embed", "CNN/W_cnn_0", "CNN_proj/W_proj", lstm_name(0, 0, "W_P_0")):
        if needed not in weights:
            raise TfHubError(
                f"{source}: no variable '{_BILM}{needed}' (or its LSTM cell's): not an ELMo biLM in bilm-tf's "
                "graph, which Google's and DeepPavlov's TF-Hub modules are"
            )
    arrays = {name: _float32(bundle, variable) for name, variable in weights.items()}
    rows = arrays["char_embed"].shape[0] if arrays["char_embed"].ndim == 2 else -1
    if rows == RAW_CHARACTERS + 1:
        arrays["char_embed"] = arrays["char_embed"][1:]  # the "no token" row (zero in both publishers' modules)
    elif rows != RAW_CHARACTERS:
        raise TfHubError(
            f"{source}: variable 'bilm/char_embed' has shape {arrays['char_embed'].shape}; an ELMo module's has "
            f"{RAW_CHARACTERS + 1} rows (byte ids + 1) or {RAW_CHARACTERS}"
        )
    options = _options({name: array.shape for name, array in arrays.items()}, source)
    record = _record(bundle, layout, mix_names, options, not_read)
    return BiLMOptions.from_dict({**options.to_dict(), TFHUB_KEY: record}), arrays


def _layout(bundle: TensorBundle) -> tuple[str, tuple[str, ...]]:
    """The publisher's layout, by the variables of its layer mix (score and scale), and their names."""
    for layout, scores, scale in _MIXES:
        for variable in sorted(bundle.entries):
            if match := scores.match(variable):
                scale_name = scale.format(*match.groups())
                if scale_name not in bundle.entries:
                    raise TfHubError(f"{bundle.index_name}: variable '{variable}' without its scale '{scale_name}'")
                return layout, (variable, scale_name)
    raise TfHubError(
        f"{bundle.index_name}: no layer-mix variables ('aggregation/weights' of Google's module, "
        "'aggregation/*_ELMo_W' of DeepPavlov's): not a TF-Hub ELMo module this reader knows"
    )


def _float32(bundle: TensorBundle, variable: str) -> numpy.ndarray:
    value = bundle.read(variable)
    if value.dtype.kind != "f":
        raise TfHubError(f"{bundle.index_name}: variable '{variable}' has dtype {value.dtype}, expected floating point")
    return value.astype(numpy.float32, copy=False)


def _options(shapes: dict[str, tuple[int, ...]], source: str) -> BiLMOptions:
    """The biLM's dimensions from the arrays' shapes (`build_bilm` then checks every array against them)."""

    def count(pattern: str) -> int:
        n = 0
        while pattern.format(n) in shapes:
            n += 1
        return n

    def dims(name: str, rank: int) -> tuple[int, ...]:
        shape = shapes[name]
        if len(shape) != rank:
            raise TfHubError(f"{source}: variable for '{name}' has shape {shape}, expected {rank} dimensions")
        return shape

    filters = [dims(f"CNN/W_cnn_{i}", 4) for i in range(count("CNN/W_cnn_{}"))]
    lstm = {
        "dim": dims(lstm_name(0, 0, "W_P_0"), 2)[0],
        "projection_dim": dims("CNN_proj/W_proj", 2)[1],
        "n_layers": count(lstm_name(0, 0, "W_0").replace("Cell0", "Cell{}")),
        **{key: FACTS[key] for key in ("cell_clip", "proj_clip", "use_skip_connections")},
    }
    char_cnn = {
        "embedding": {"dim": dims("char_embed", 2)[1]},
        "filters": [[width, n] for _, width, _, n in filters],
        "n_highway": count("CNN_high_{}/W_carry"),
        **{key: FACTS[key] for key in ("n_characters", "max_characters_per_token", "activation")},
    }
    with reading(f"{source} (the options its variables imply)"):
        return BiLMOptions.from_dict({"char_cnn": char_cnn, "lstm": lstm})


def _record(
    bundle: TensorBundle, layout: str, mix_names: tuple[str, ...], options: BiLMOptions, not_read: list[str]
) -> dict[str, Any]:
    """What the module adds to the biLM: its layer mix, and what was not read (kept in the options)."""
    scores_name, scale_name = mix_names
    scores, scale = _float32(bundle, scores_name), _float32(bundle, scale_name)
    layers = options.n_output_layers
    if scores.shape != (layers,) or scale.size != 1:
        raise TfHubError(
            f"{bundle.index_name}: the layer mix '{scores_name}' {scores.shape} and '{scale_name}' {scale.shape} "
            f"do not fit a biLM of {layers} layers (expected ({layers},) and one scale)"
        )
    exp = numpy.exp(scores - scores.max())
    weights = exp / exp.sum() * scale.reshape(())  # float32, as the module's graph computes them
    return {
        "layout": layout,
        "source": SOURCES[layout],
        "mix": {
            "scores": [float(s) for s in scores],
            "scale": float(scale.reshape(())),
            "weights": [float(w) for w in weights],
            "variables": list(mix_names),
        },
        "not_read": not_read,
        "note": (
            "the module's outputs word_emb, lstm_outputs1 and lstm_outputs2 are the biLM's layers 0 (its first "
            "half), 1 and 2; its elmo output is scale * sum_j softmax(scores)_j * layer_j, a mix learned with the "
            "module that the biLM does not apply: mix.weights gives it (e.g. as the elmo pipe's default_mix)"
        ),
    }
