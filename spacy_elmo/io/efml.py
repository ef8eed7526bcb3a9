"""ELMoForManyLangs (HIT-SCIR) models: read into a native biLM, and written back in their own layout.

A model directory holds `config.json` (the training run's arguments; its `config_path` names the
architecture JSON, often a path on the authors' machine or a file of the ELMoForManyLangs package),
`char.dic` and `word.dic` (`entry<TAB>id` lines), and `token_embedder.pkl` / `encoder.pkl` (PyTorch
`state_dict`s, usually in PyTorch 0.4's legacy container). The state dicts are read with
`torch.load(weights_only=True)`: tensors and plain containers only, so a file carrying any other pickled
object is refused and nothing in it runs.

What differs from bilm-tf, and how it is kept exact (as data: options and a `Lexicon`, not other code):
- characters are code points looked up in `char.dic` (a token cut to max_characters_per_token - 2),
  framed by the `<eow>` entry in front and the `<bow>` entry behind (ELMoForManyLangs uses the two
  swapped; kept as it is), padded with `<pad>`, unknown ones `<oov>`;
- a word embedding (`word.dic`) joins the highway's output in front, before the projection;
- the highway gate scales the input (AllenNLP's parametrisation: first half of each highway matrix is the
  transform, second half the gate), stored as the transform and carry matrices, transposed;
- the LSTM is AllenNLP's `LstmCellWithProjection`: gates i, f, g, o (stored permuted to bilm-tf's i, g, f,
  o), the bias on the state product only, no forget bias added at run time (option `forget_bias` 0).
Each step is a transpose, a slice or a permutation, so EFML -> native -> EFML is bit for bit.
"""

import io
import json
import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Union

import numpy

from ..bilm.bilm import BiLM
from ..bilm.lexicon import Lexicon, LexiconError, gap
from ..bilm.options import BiLMOptions, OptionsError
from ..errors import ModelFileError
from .archive import read_member
from .arrays import bilm_arrays, build_bilm, lstm_name
from .atomic import atomic_write_bytes, atomic_write_text

PathLike = Union[str, Path]
CONFIG_FILE = "config.json"
TOKEN_EMBEDDER_FILE = "token_embedder.pkl"
ENCODER_FILE = "encoder.pkl"
CHAR_DIC, WORD_DIC = "char.dic", "word.dic"
MODEL_FILES = (CONFIG_FILE, TOKEN_EMBEDDER_FILE, ENCODER_FILE)
ARCHITECTURE_FILE = "elmo_architecture.json"  # what `save_efml` names the architecture JSON

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
GATES_TO_BILM_TF = (0, 2, 1, 3)  # AllenNLP's i, f, g, o -> bilm-tf's i, j(g), f, o (its own inverse)


class EfmlError(ModelFileError):
    """An ELMoForManyLangs model that is incomplete, unsafe, or whose parts disagree."""


def is_efml(path: Path) -> bool:
    return path.is_dir() and all((path / name).exists() for name in MODEL_FILES)


@dataclass(frozen=True)
class EfmlFiles:
    """Where each part of a model is, and how to read it (a directory, or members of an archive)."""

    name: str  # how errors name the model
    read: Callable[[str], bytes]  # file name -> bytes (FileNotFoundError when absent)

    @classmethod
    def directory(cls, path: Path) -> "EfmlFiles":
        def read(name: str) -> bytes:
            target = path / name
            if not target.is_file():
                raise FileNotFoundError(f"{target}: missing (an ELMoForManyLangs model needs {', '.join(MODEL_FILES)})")
            return target.read_bytes()

        return cls(str(path), read)

    @classmethod
    def archive(cls, path: Path, prefix: str) -> "EfmlFiles":
        """The model's files as members of a zip archive (under `prefix`), read in place, each within what
        its kind can need (`archive.role_limit`)."""
        return cls(str(path), lambda name: read_member(path, prefix + name))

    def where(self, name: str) -> str:
        return f"{self.name}/{name}"


def read_efml(files: EfmlFiles) -> BiLM:
    """The biLM of an ELMoForManyLangs model, every file, key and shape checked."""
    config = _json(files, CONFIG_FILE)
    architecture, architecture_name = _architecture(files, config)
    embedder_config, encoder_config = _sections(architecture, files.where(architecture_name))
    token_embedder = _state_dict(files, TOKEN_EMBEDDER_FILE)
    encoder = _state_dict(files, ENCODER_FILE)
    if not embedder_config["char_dim"] > 0:
        raise EfmlError(
            f"{files.where(architecture_name)}: token_embedder.char_dim is 0 (a word-only model); only models "
            "with a character CNN are supported"
        )
    chars, char_aliases = _dictionary(files, CHAR_DIC)
    words, word_aliases = _dictionary(files, WORD_DIC) if embedder_config["word_dim"] > 0 else (None, {})
    options = _options(architecture, embedder_config, encoder_config, len(chars), len(words or []))
    arrays = _arrays(options, token_embedder, encoder, files)
    try:
        lexicon = Lexicon(
            characters=chars,
            character_roles=dict(CHARACTER_ROLES),
            max_characters_per_token=options.max_characters_per_token,
            words=words,
            word_roles=dict(WORD_ROLES) if words is not None else {},
            character_aliases=char_aliases,
            word_aliases=word_aliases,
        )
    except LexiconError as err:
        raise EfmlError(f"{files.name}: {err}") from None
    return build_bilm(options, arrays, source=files.name, lexicon=lexicon)


def load_efml(path: PathLike) -> BiLM:
    return read_efml(EfmlFiles.directory(Path(path)))


def _json(files: EfmlFiles, name: str) -> dict[str, Any]:
    try:
        data = json.loads(files.read(name).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise EfmlError(f"{files.where(name)}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise EfmlError(f"{files.where(name)}: expected a JSON object")
    return data


def _architecture(files: EfmlFiles, config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The architecture JSON `config_path` names: in the model's directory (as given, or its file name), or
    one that ELMoForManyLangs ships in its package."""
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
        f"{files.name} nor one ELMoForManyLangs ships ({', '.join(PACKAGED_ARCHITECTURES)}); copy it beside "
        "config.json"
    )


def _sections(architecture: dict[str, Any], source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    embedder, encoder = architecture.get("token_embedder"), architecture.get("encoder")
    if not isinstance(embedder, dict) or not isinstance(encoder, dict):
        raise EfmlError(f"{source}: expected 'token_embedder' and 'encoder' sections")
    if str(embedder.get("name", "")).lower() != "cnn":
        raise EfmlError(f"{source}: token_embedder.name is {embedder.get('name')!r}; only 'cnn' is supported")
    if str(encoder.get("name", "")).lower() != "elmo":
        raise EfmlError(f"{source}: encoder.name is {encoder.get('name')!r}; only 'elmo' is supported")
    missing = [
        f"{section}.{key}"
        for section, values, keys in (
            (
                "token_embedder",
                embedder,
                ("activation", "filters", "n_highway", "word_dim", "char_dim", "max_characters_per_token"),
            ),
            ("encoder", encoder, ("projection_dim", "dim", "n_layers")),
        )
        for key in keys
        if key not in values
    ]
    if missing:
        raise EfmlError(f"{source}: missing {', '.join(missing)}")
    return embedder, encoder


def _options(
    architecture: dict[str, Any], embedder: dict[str, Any], encoder: dict[str, Any], n_chars: int, n_words: int
) -> BiLMOptions:
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
            **({"cell_clip": encoder["cell_clip"]} if encoder.get("cell_clip") else {}),
            **({"proj_clip": encoder["proj_clip"]} if encoder.get("proj_clip") else {}),
        },
    }
    try:
        return BiLMOptions.from_dict(data, source="the architecture JSON")
    except OptionsError as err:
        raise EfmlError(str(err)) from None


def _state_dict(files: EfmlFiles, name: str) -> dict[str, numpy.ndarray]:
    """A state dict as float32 arrays, read without running pickled code."""
    import torch

    data = files.read(name)
    try:
        loaded = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise EfmlError(
            f"{files.where(name)}: refused: it holds something other than tensors, which loading would have to "
            f"execute ({_first_line(err)})"
        ) from None
    except Exception as err:  # a cut or damaged file: EOFError, IndexError, KeyError, struct.error, RuntimeError...
        raise EfmlError(
            f"{files.where(name)}: not a readable PyTorch state dict (cut short or damaged? "
            f"{type(err).__name__}: {_first_line(err)})"
        ) from None
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise EfmlError(f"{files.where(name)}: expected a state dict (names -> tensors)")
    return {str(k): v.detach().to(torch.float32).numpy() for k, v in loaded.items()}


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:200]


def _dictionary(files: EfmlFiles, name: str) -> tuple[list[str], dict[str, int]]:
    """(entries in id order, {further entry: the id it shares}), read as ELMoForManyLangs reads a .dic
    file: each line stripped and split at tabs, a line with one field being the entry '\u3000' (whitespace
    that the strip removed), the id read by `int`, the last line of an entry winning. Its embedding has one
    row per distinct entry, so the ids must be below that count: a file whose ids are not (a line removed,
    an id out of range) is refused, as ELMoForManyLangs fails on it (a shape mismatch at load, an index
    error at run time), before anything is allocated per id. Entries sharing an id all read its row; an
    id no entry has (there is then one such id for each shared one) gets a `gap` that no text reaches."""
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


def _efml_shapes(options: BiLMOptions) -> dict[str, dict[str, tuple[int, ...]]]:
    """Every tensor each file must hold, by name, with the shape the architecture and vocabularies imply."""
    o = options
    F, P, C = o.n_filters, o.projection_dim, o.lstm_dim
    embedder: dict[str, tuple[int, ...]] = {
        "char_emb_layer.embedding.weight": (o.char_vocab_size, o.char_embedding_dim)
    }
    if o.word_dim:
        embedder["word_emb_layer.embedding.weight"] = (o.word_vocab_size, o.word_dim)
    for i, (width, n) in enumerate(o.filters):
        embedder[f"convolutions.{i}.weight"] = (n, o.char_embedding_dim, width)
        embedder[f"convolutions.{i}.bias"] = (n,)
    for k in range(o.n_highway):
        embedder[f"highways._layers.{k}.weight"] = (2 * F, F)
        embedder[f"highways._layers.{k}.bias"] = (2 * F,)
    embedder["projection.weight"] = (P, o.word_dim + F)
    embedder["projection.bias"] = (P,)
    encoder: dict[str, tuple[int, ...]] = {}
    for direction in ("forward", "backward"):
        for layer in range(o.n_layers):
            prefix = f"{direction}_layer_{layer}"
            encoder[f"{prefix}.input_linearity.weight"] = (4 * C, P)
            encoder[f"{prefix}.state_linearity.weight"] = (4 * C, P)
            encoder[f"{prefix}.state_linearity.bias"] = (4 * C,)
            encoder[f"{prefix}.state_projection.weight"] = (P, C)
    return {TOKEN_EMBEDDER_FILE: embedder, ENCODER_FILE: encoder}


def _check_shapes(state: dict[str, numpy.ndarray], expected: dict[str, tuple[int, ...]], where: str) -> None:
    problems = [f"'{k}' is missing (expected shape {shape})" for k, shape in expected.items() if k not in state]
    problems += [
        f"'{k}' has shape {tuple(state[k].shape)}, the architecture JSON and vocabularies imply {shape}"
        for k, shape in expected.items()
        if k in state and tuple(state[k].shape) != shape
    ]
    problems += [f"'{k}' is not part of the model the architecture JSON describes" for k in state if k not in expected]
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise EfmlError(f"{where}: {shown}")


def _gates(matrix: numpy.ndarray, axis: int) -> numpy.ndarray:
    """Reorder the 4 gate blocks along `axis` (the permutation is its own inverse)."""
    blocks = numpy.split(matrix, 4, axis=axis)
    return numpy.concatenate([blocks[i] for i in GATES_TO_BILM_TF], axis=axis)


def _arrays(
    options: BiLMOptions, embedder: dict[str, numpy.ndarray], encoder: dict[str, numpy.ndarray], files: EfmlFiles
) -> dict[str, numpy.ndarray]:
    """The state dicts in the reference layout (`arrays.py`)."""
    expected = _efml_shapes(options)
    _check_shapes(embedder, expected[TOKEN_EMBEDDER_FILE], files.where(TOKEN_EMBEDDER_FILE))
    _check_shapes(encoder, expected[ENCODER_FILE], files.where(ENCODER_FILE))
    F = options.n_filters
    arrays = {"char_embed": embedder["char_emb_layer.embedding.weight"]}
    if options.word_dim:
        arrays["word_embed"] = embedder["word_emb_layer.embedding.weight"]
    for i in range(len(options.filters)):
        arrays[f"CNN/W_cnn_{i}"] = numpy.ascontiguousarray(
            embedder[f"convolutions.{i}.weight"].transpose(2, 1, 0)[None]
        )
        arrays[f"CNN/b_cnn_{i}"] = embedder[f"convolutions.{i}.bias"]
    for k in range(options.n_highway):
        weight, bias = embedder[f"highways._layers.{k}.weight"], embedder[f"highways._layers.{k}.bias"]
        arrays[f"CNN_high_{k}/W_transform"] = numpy.ascontiguousarray(weight[:F].T)
        arrays[f"CNN_high_{k}/b_transform"] = bias[:F]
        arrays[f"CNN_high_{k}/W_carry"] = numpy.ascontiguousarray(weight[F:].T)
        arrays[f"CNN_high_{k}/b_carry"] = bias[F:]
    arrays["CNN_proj/W_proj"] = numpy.ascontiguousarray(embedder["projection.weight"].T)
    arrays["CNN_proj/b_proj"] = embedder["projection.bias"]
    for direction, name in enumerate(("forward", "backward")):
        for layer in range(options.n_layers):
            prefix = f"{name}_layer_{layer}"
            w_in = _gates(encoder[f"{prefix}.input_linearity.weight"], axis=0).T
            w_state = _gates(encoder[f"{prefix}.state_linearity.weight"], axis=0).T
            arrays[lstm_name(direction, layer, "W_0")] = numpy.ascontiguousarray(numpy.concatenate([w_in, w_state]))
            arrays[lstm_name(direction, layer, "B")] = _gates(encoder[f"{prefix}.state_linearity.bias"], axis=0)
            arrays[lstm_name(direction, layer, "W_P_0")] = numpy.ascontiguousarray(
                encoder[f"{prefix}.state_projection.weight"].T
            )
    return arrays


def efml_state_dicts(bilm: BiLM) -> dict[str, dict[str, numpy.ndarray]]:
    """The biLM's weights as ELMoForManyLangs' two state dicts (the inverse of `_arrays`)."""
    o = bilm.options
    arrays = dict(bilm_arrays(bilm))
    P = o.projection_dim
    embedder = {"char_emb_layer.embedding.weight": arrays["char_embed"]}
    if o.word_dim:
        embedder["word_emb_layer.embedding.weight"] = arrays["word_embed"]
    for i in range(len(o.filters)):
        embedder[f"convolutions.{i}.weight"] = numpy.ascontiguousarray(arrays[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0))
        embedder[f"convolutions.{i}.bias"] = arrays[f"CNN/b_cnn_{i}"]
    for k in range(o.n_highway):
        embedder[f"highways._layers.{k}.weight"] = numpy.ascontiguousarray(
            numpy.concatenate([arrays[f"CNN_high_{k}/W_transform"].T, arrays[f"CNN_high_{k}/W_carry"].T])
        )
        embedder[f"highways._layers.{k}.bias"] = numpy.concatenate(
            [arrays[f"CNN_high_{k}/b_transform"], arrays[f"CNN_high_{k}/b_carry"]]
        )
    embedder["projection.weight"] = numpy.ascontiguousarray(arrays["CNN_proj/W_proj"].T)
    embedder["projection.bias"] = arrays["CNN_proj/b_proj"]
    encoder = {}
    for direction, name in enumerate(("forward", "backward")):
        for layer in range(o.n_layers):
            prefix = f"{name}_layer_{layer}"
            w0 = arrays[lstm_name(direction, layer, "W_0")]
            encoder[f"{prefix}.input_linearity.weight"] = numpy.ascontiguousarray(_gates(w0[:P].T, axis=0))
            encoder[f"{prefix}.state_linearity.weight"] = numpy.ascontiguousarray(_gates(w0[P:].T, axis=0))
            encoder[f"{prefix}.state_linearity.bias"] = _gates(arrays[lstm_name(direction, layer, "B")], axis=0)
            encoder[f"{prefix}.state_projection.weight"] = numpy.ascontiguousarray(
                arrays[lstm_name(direction, layer, "W_P_0")].T
            )
    return {TOKEN_EMBEDDER_FILE: embedder, ENCODER_FILE: encoder}


def save_efml(bilm: BiLM, directory: PathLike) -> Path:
    """Write a model in ELMoForManyLangs' layout (legacy PyTorch containers, as its releases), which
    ELMoForManyLangs' `Embedder` loads. Only models read from that layout fit it."""
    import torch

    o = bilm.options
    lexicon = bilm.lexicon
    if lexicon is None or o.highway_gate != "input" or o.forget_bias != 0.0 or not o.use_skip_connections:
        raise EfmlError(
            "the ELMoForManyLangs layout holds only models with its own character vocabulary, AllenNLP's "
            "highway/LSTM parametrisation and residual connections (models read from that layout)"
        )
    if lexicon.character_roles != CHARACTER_ROLES or (lexicon.words is not None and lexicon.word_roles != WORD_ROLES):
        raise EfmlError("the ELMoForManyLangs layout needs its own marker entries (<bow>, <eow>, <pad>, <oov>)")
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for name, state in efml_state_dicts(bilm).items():
        buffer = io.BytesIO()
        tensors = {k: torch.from_numpy(numpy.ascontiguousarray(v)) for k, v in state.items()}
        torch.save(tensors, buffer, _use_new_zipfile_serialization=False)
        atomic_write_bytes(target / name, buffer.getvalue())
    architecture = {
        "encoder": {
            "name": "elmo",
            "projection_dim": o.projection_dim,
            "cell_clip": o.cell_clip or 0,
            "proj_clip": o.proj_clip or 0,
            "dim": o.lstm_dim,
            "n_layers": o.n_layers,
        },
        "token_embedder": {
            "name": "cnn",
            "activation": o.activation,
            "filters": [[w, n] for w, n in o.filters],
            "n_highway": o.n_highway,
            "word_dim": o.word_dim,
            "char_dim": o.char_embedding_dim,
            "max_characters_per_token": o.max_characters_per_token,
        },
        "dropout": 0.0,
    }
    atomic_write_text(target / ARCHITECTURE_FILE, json.dumps(architecture, indent=2) + "\n")
    atomic_write_text(target / CONFIG_FILE, json.dumps({"config_path": ARCHITECTURE_FILE}, indent=2) + "\n")
    atomic_write_text(target / CHAR_DIC, "".join(_dic_lines(lexicon.characters, lexicon.character_aliases)))
    if lexicon.words is not None:
        atomic_write_text(target / WORD_DIC, "".join(_dic_lines(lexicon.words, lexicon.word_aliases)))
    return target


def _dic_lines(entries: list[str], aliases: dict[str, int]) -> Iterator[str]:
    """`entry<TAB>id` lines in id order, the entries sharing an id after its first (`_dictionary`)."""
    shared: dict[int, list[str]] = {}
    for entry, i in aliases.items():
        shared.setdefault(i, []).append(entry)
    for i, entry in enumerate(entries):
        if entry != gap(i):
            yield f"{entry}\t{i}\n"
        for alias in shared.get(i, []):
            yield f"{alias}\t{i}\n"
