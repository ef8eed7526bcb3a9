"""ELMoForManyLangs (HIT-SCIR) models read into a native biLM: `config.json` (its `config_path` names the
architecture JSON), `char.dic`/`word.dic` (`entry<TAB>id` lines) and two state dicts read with
`torch.load(weights_only=True)`. What differs from bilm-tf is data (options, a `Lexicon`, `_name_table`):
- characters are looked up in `char.dic`, framed by the `<eow>` entry in front and `<bow>` behind
  (ELMoForManyLangs swaps the two; kept), padded with `<pad>`, unknown ones `<oov>`;
- a word embedding (`word.dic`) joins the highway's output in front, before the projection;
- the highway gate scales the input (AllenNLP's parametrisation: each matrix the transform, then the gate);
- the LSTM is AllenNLP's `LstmCellWithProjection`: gates i, f, g, o (stored permuted to bilm-tf's i, g, f,
  o), the bias on the state product only, no forget bias added at run time.
"""

import io
import json
import pickle
import re
from typing import Any, Callable, Optional

import numpy

from ..bilm.bilm import BiLM
from ..bilm.lexicon import Lexicon, gap
from ..bilm.options import BiLMOptions
from ..errors import ModelFileError, first_line, reading
from .arrays import build_bilm, lstm_name
from .digest import ModelFile
from .files import ModelFiles
from .formats import Container, Format, LoadedModel, ModelSource, digested

CONFIG_FILE = "config.json"
TOKEN_EMBEDDER_FILE = "token_embedder.pkl"
ENCODER_FILE = "encoder.pkl"
CHAR_DIC, WORD_DIC = "char.dic", "word.dic"
MODEL_FILES = (CONFIG_FILE, TOKEN_EMBEDDER_FILE, ENCODER_FILE)

# The architecture JSONs that ELMoForManyLangs ships in its package (and that released models' config.json
# name without including them): the numbers, so such a model loads without that package.
_SAMPLE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
PACKAGED_ARCHITECTURES = {"cnn_50_100_512_4096_sample.json": _SAMPLE, "cnn_0_100_512_4096_sample.json": _SAMPLE}

CHARACTER_ROLES = {"begin_of_word": "<eow>", "end_of_word": "<bow>", "padding": "<pad>", "unknown": "<oov>"}
WORD_ROLES = {"padding": "<pad>", "unknown": "<oov>"}
REQUIRED = {
    "token_embedder": ("activation", "filters", "n_highway", "word_dim", "char_dim", "max_characters_per_token"),
    "encoder": ("projection_dim", "dim", "n_layers"),
}
GATES_TO_BILM_TF = (0, 2, 1, 3)  # AllenNLP's i, f, g, o -> bilm-tf's i, j(g), f, o (its own inverse)


class EfmlError(ModelFileError):
    """An ELMoForManyLangs model that is incomplete, unsafe, or whose parts disagree."""


class EfmlFormat(Format):
    """config.json, token_embedder.pkl and encoder.pkl (+ the dictionaries and the architecture JSON), in a
    directory or a zip archive; what the model is made of is what reading it read."""

    name = "efml"

    def recognise(self, container: Container) -> Optional[ModelSource]:
        if not all(container.files.exists(name) for name in MODEL_FILES):
            return None
        return ModelSource(self, container.path, container.files, {})

    def read(self, source: ModelSource, files: list[ModelFile]) -> LoadedModel:
        return digested(_read_efml(source.files), source, source.read_files())  # read_files: what was read


EFML = EfmlFormat()


def _read_efml(files: ModelFiles) -> BiLM:
    """The biLM of an ELMoForManyLangs model, every file, key and shape checked."""
    config = _json(files, CONFIG_FILE)
    architecture, architecture_name = _architecture(files, config)
    with reading(files.where(architecture_name)):
        embedder_config, encoder_config = _sections(architecture)
    state = {name: _state_dict(files, name) for name in (TOKEN_EMBEDDER_FILE, ENCODER_FILE)}
    if not embedder_config["char_dim"] > 0:
        raise EfmlError(
            f"{files.where(architecture_name)}: token_embedder.char_dim is 0 (a word-only model); only models "
            "with a character CNN are supported"
        )
    chars, char_aliases = _dictionary(files, CHAR_DIC)
    words, word_aliases = _dictionary(files, WORD_DIC) if embedder_config["word_dim"] > 0 else (None, {})
    with reading(f"{files.where(architecture_name)} (as options.json)"):
        options = _options(embedder_config, encoder_config, len(chars), len(words or []))
    arrays = _arrays(options, state, files)
    with reading(str(files.root)):
        lexicon = Lexicon(
            characters=chars,
            character_roles=dict(CHARACTER_ROLES),
            max_characters_per_token=options.max_characters_per_token,
            words=words,
            word_roles=dict(WORD_ROLES) if words is not None else {},
            character_aliases=char_aliases,
            word_aliases=word_aliases,
        )
        return build_bilm(options, arrays, lexicon=lexicon)


def _json(files: ModelFiles, name: str) -> dict[str, Any]:
    try:
        data = json.loads(files.read(name).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise EfmlError(f"{files.where(name)}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise EfmlError(f"{files.where(name)}: expected a JSON object")
    return data


def _architecture(files: ModelFiles, config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The architecture JSON `config_path` names: beside config.json, or one ELMoForManyLangs ships."""
    named = config.get("config_path")
    if not isinstance(named, str) or not named:
        raise EfmlError(f"{files.where(CONFIG_FILE)}: no 'config_path' naming the architecture JSON")
    basename = re.split(r"[\\/]", named)[-1]
    for candidate in dict.fromkeys([named, basename]):
        try:
            return _json(files, candidate), candidate
        except FileNotFoundError:
            continue
    if basename in PACKAGED_ARCHITECTURES:
        return json.loads(json.dumps(PACKAGED_ARCHITECTURES[basename])), basename
    raise EfmlError(
        f"{files.where(CONFIG_FILE)}: config_path {named!r} names an architecture JSON that is neither in "
        f"{files.root} nor one ELMoForManyLangs ships ({', '.join(PACKAGED_ARCHITECTURES)}); copy it beside "
        "config.json"
    )


def _sections(architecture: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    embedder, encoder = architecture.get("token_embedder"), architecture.get("encoder")
    if not isinstance(embedder, dict) or not isinstance(encoder, dict):
        raise EfmlError("expected 'token_embedder' and 'encoder' sections")
    for part, section, supported in (("token_embedder", embedder, "cnn"), ("encoder", encoder, "elmo")):
        if str(section.get("name", "")).lower() != supported:
            raise EfmlError(f"{part}.name is {section.get('name')!r}; only {supported!r} is supported")
    missing = [f"{part}.{key}" for part, keys in REQUIRED.items() for key in keys if key not in architecture[part]]
    if missing:
        raise EfmlError(f"missing {', '.join(missing)}")
    return embedder, encoder


def _options(embedder: dict[str, Any], encoder: dict[str, Any], n_chars: int, n_words: int) -> BiLMOptions:
    """The options the architecture JSON and the vocabularies describe."""
    data = {
        "char_cnn": {
            "embedding": {"dim": embedder["char_dim"]},
            "filters": embedder["filters"],
            "n_highway": embedder["n_highway"],
            "activation": embedder["activation"],
            "n_characters": 262,
            "max_characters_per_token": embedder["max_characters_per_token"],
            "char_vocab_size": n_chars,
            "highway_gate": "input",
            **({"word_dim": embedder["word_dim"], "word_vocab_size": n_words} if embedder["word_dim"] else {}),
        },
        "lstm": {
            "dim": encoder["dim"],
            "projection_dim": encoder["projection_dim"],
            "n_layers": encoder["n_layers"],
            "use_skip_connections": True,
            "forget_bias": 0.0,
            **{clip: encoder[clip] for clip in ("cell_clip", "proj_clip") if encoder.get(clip)},
        },
    }
    return BiLMOptions.from_dict(data)


def _state_dict(files: ModelFiles, name: str) -> dict[str, numpy.ndarray]:
    """A state dict as float32 arrays, read without running pickled code."""
    import torch

    data = files.read(name)
    try:
        loaded = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise EfmlError(
            f"{files.where(name)}: refused: it holds something other than tensors, which loading would have to "
            f"execute ({first_line(err)})"
        ) from None
    except Exception as err:  # a cut or damaged file: EOFError, IndexError, KeyError, struct.error, RuntimeError...
        raise EfmlError(
            f"{files.where(name)}: not a readable PyTorch state dict (cut short or damaged? "
            f"{type(err).__name__}: {first_line(err)})"
        ) from None
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise EfmlError(f"{files.where(name)}: expected a state dict (names -> tensors)")
    return {str(k): v.detach().to(torch.float32).numpy() for k, v in loaded.items()}


def _dictionary(files: ModelFiles, name: str) -> tuple[list[str], dict[str, int]]:
    """(entries in id order, {further entry: the id it shares}), parsed as ELMoForManyLangs parses a .dic file
    (a one-field line is the entry '\u3000'); ids must be below the entry count, as its embedding has a row
    per entry. An id no entry has gets a `gap` that no text reaches."""
    try:
        text = files.read(name).decode("utf-8")
    except UnicodeDecodeError as err:
        raise EfmlError(f"{files.where(name)}: not UTF-8 ({err})") from None
    ids: dict[str, int] = {}
    lines: dict[str, int] = {}  # the line each entry's id was read from
    for number, line in enumerate(text.splitlines(True), start=1):  # codecs' line splitting, as EFML reads
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        try:
            entry, value = fields
            ids[entry] = int(value)
        except ValueError:
            raise EfmlError(
                f"{files.where(name)}, line {number}: expected 'entry<TAB>id', got {line.rstrip()!r}"
            ) from None
        lines[entry] = number
    if not ids:
        raise EfmlError(f"{files.where(name)}: empty")
    size = len(ids)
    outside = [entry for entry, i in ids.items() if not 0 <= i < size]
    if outside:
        entry = min(outside, key=lines.__getitem__)
        missing = min(set(range(size)) - set(ids.values()), default=None)
        raise EfmlError(
            f"{files.where(name)}, line {lines[entry]}: id {ids[entry]} of {entry!r} is out of range: the file "
            f"has {size} entries, and ELMoForManyLangs gives its embedding one row per entry, so ids run from 0 "
            f"to {size - 1}" + (f" (no entry has id {missing}: a line removed?)" if missing is not None else "")
        )
    entries = [gap(i) for i in range(size)]
    aliases: dict[str, int] = {}
    for entry, i in ids.items():
        if entries[i] == gap(i):
            entries[i] = entry
        else:
            aliases[entry] = i
    return entries, aliases


Shapes = dict[str, tuple[int, ...]]
Row = tuple[str, str, Shapes, Callable[..., numpy.ndarray]]


def _name_table(o: BiLMOptions) -> list[Row]:
    """(reference array, the file of its tensors, their expected shapes, how it is made of them): drives
    both the shape check and the import."""
    F, P, C, D = o.n_filters, o.projection_dim, o.lstm_dim, o.char_embedding_dim
    E, L, same = TOKEN_EMBEDDER_FILE, ENCODER_FILE, numpy.asarray
    rows: list[Row] = [("char_embed", E, {"char_emb_layer.embedding.weight": (o.char_vocab_size, D)}, same)]
    if o.word_dim:
        rows.append(("word_embed", E, {"word_emb_layer.embedding.weight": (o.word_vocab_size, o.word_dim)}, same))
    for i, (width, n) in enumerate(o.filters):  # a conv1d kernel (n, D, width) -> bilm-tf's (1, width, D, n)
        conv: Shapes = {f"convolutions.{i}.weight": (n, D, width)}
        rows.append((f"CNN/W_cnn_{i}", E, conv, lambda w: w.transpose(2, 1, 0)[None]))
        rows.append((f"CNN/b_cnn_{i}", E, {f"convolutions.{i}.bias": (n,)}, same))
    for k in range(o.n_highway):  # AllenNLP's highway: the transform's rows, then the gate's
        weight: Shapes = {f"highways._layers.{k}.weight": (2 * F, F)}
        bias: Shapes = {f"highways._layers.{k}.bias": (2 * F,)}
        rows.append((f"CNN_high_{k}/W_transform", E, weight, lambda w: w[:F].T))
        rows.append((f"CNN_high_{k}/b_transform", E, bias, lambda b: b[:F]))
        rows.append((f"CNN_high_{k}/W_carry", E, weight, lambda w: w[F:].T))
        rows.append((f"CNN_high_{k}/b_carry", E, bias, lambda b: b[F:]))
    rows.append(("CNN_proj/W_proj", E, {"projection.weight": (P, o.word_dim + F)}, numpy.transpose))
    rows.append(("CNN_proj/b_proj", E, {"projection.bias": (P,)}, same))
    for direction, name in enumerate(("forward", "backward")):
        for layer in range(o.n_layers):
            cell = f"{name}_layer_{layer}."
            products: Shapes = {f"{cell}{kind}_linearity.weight": (4 * C, P) for kind in ("input", "state")}
            # bilm-tf's one kernel over [input; state], gates permuted
            rows.append((lstm_name(direction, layer, "W_0"), L, products, lambda i, s: _gates(numpy.hstack([i, s])).T))
            rows.append((lstm_name(direction, layer, "B"), L, {f"{cell}state_linearity.bias": (4 * C,)}, _gates))
            rows.append(
                (lstm_name(direction, layer, "W_P_0"), L, {f"{cell}state_projection.weight": (P, C)}, numpy.transpose)
            )
    return rows


def _gates(matrix: numpy.ndarray) -> numpy.ndarray:
    """Reorder the 4 gate blocks along the first axis (the permutation is its own inverse)."""
    blocks = numpy.split(matrix, 4, axis=0)
    return numpy.concatenate([blocks[i] for i in GATES_TO_BILM_TF], axis=0)


def _arrays(
    options: BiLMOptions, state: dict[str, dict[str, numpy.ndarray]], files: ModelFiles
) -> dict[str, numpy.ndarray]:
    """The state dicts in the reference layout, each tensor's name and shape checked first."""
    table = _name_table(options)
    for file, tensors in state.items():
        expected = {name: shape for _, f, shapes, _ in table if f == file for name, shape in shapes.items()}
        problems = [f"'{k}' is missing (expected shape {shape})" for k, shape in expected.items() if k not in tensors]
        problems += [
            f"'{k}' has shape {tuple(tensors[k].shape)}, the architecture JSON and vocabularies imply {shape}"
            for k, shape in expected.items()
            if k in tensors and tuple(tensors[k].shape) != shape
        ]
        problems += [
            f"'{k}' is not part of the model the architecture JSON describes" for k in tensors if k not in expected
        ]
        if problems:
            shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
            raise EfmlError(f"{files.where(file)}: {shown}")
    return {
        reference: numpy.ascontiguousarray(make(*(state[file][name] for name in shapes)))
        for reference, file, shapes, make in table
    }
