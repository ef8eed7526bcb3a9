"""The biLM's configuration: the bilm-tf/AllenNLP `options.json` schema, validated once.

Keeping the reference schema (rather than a new one) means an `options.json` from bilm-tf or AllenNLP
loads unchanged, and an exported model's options load there. Keys this package does not use are kept
in `extra` so that a round trip writes them back.

`BiLMOptions` is the schema (a strict pydantic dataclass: nothing coerced, 128.9 is not 128, "false" is
not a boolean, and only an integral float such as 4096.0 counts as an integer). `FILE_KEYS` says where
each option is in options.json; `from_dict` reads it from there and reports every problem at once, each
with its key, naming the file.
"""

import copy
import dataclasses
import json
import typing
from dataclasses import InitVar
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass

from .. import chars
from ..errors import ModelFileError


class OptionsError(ModelFileError):
    """An options.json that is missing a key or holds a value the biLM cannot use."""


def _integral(value: Any) -> Any:
    """4096.0 -> 4096; anything else as it is (for the strict integer check)."""
    return int(value) if type(value) is float and value.is_integer() else value


def _not_float(value: Any) -> Any:
    if isinstance(value, float):
        raise ValueError("a float")  # 261.0 is not one of the choices 261, 262
    return value


def _pairs(value: Any) -> Any:
    """[[width, n], ...] as JSON has it -> [(width, n), ...]; anything else as it is."""
    return [tuple(pair) if isinstance(pair, list) else pair for pair in value] if isinstance(value, list) else value


Integer = Annotated[int, BeforeValidator(_integral)]
Activation = Literal["relu", "tanh"]
ACTIVATIONS: tuple[str, ...] = typing.get_args(Activation)
NumberOfCharacters = Annotated[Literal[261, 262], BeforeValidator(_not_float)]  # 261: without the "no token" id
Filters = Annotated[
    list[tuple[Annotated[Integer, Field(ge=1)], Annotated[Integer, Field(ge=1)]]],
    Field(min_length=1),
    BeforeValidator(_pairs),
]
Clip = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


@dataclass(config=ConfigDict(strict=True))
class BiLMOptions:
    """Dimensions and switches of a biLM, named as in bilm-tf's options.json, and their schema."""

    # char_cnn
    filters: Filters
    char_embedding_dim: Annotated[Integer, Field(ge=1)] = 16
    n_highway: Annotated[Integer, Field(ge=0)] = 2
    activation: Activation = "relu"
    n_characters: NumberOfCharacters = 262  # chars.N_CHARACTERS
    max_characters_per_token: Annotated[Integer, Field(ge=3)] = chars.MAX_CHARACTERS_PER_TOKEN
    # lstm
    lstm_dim: Annotated[Integer, Field(ge=1)] = 4096
    projection_dim: Annotated[Integer, Field(ge=1)] = 512
    n_layers: Annotated[Integer, Field(ge=1)] = 2
    cell_clip: Optional[Clip] = 3.0  # None: no clipping
    proj_clip: Optional[Clip] = 3.0
    use_skip_connections: bool = True
    # language-model head (pretraining); 0 = no softmax
    n_tokens_vocab: Annotated[Integer, Field(ge=0)] = 0
    # ELMoForManyLangs-style models (bilm-tf's values by default, and then absent from options.json):
    # a character vocabulary of the model's own (`lexicon.py`; 0 = bilm-tf's byte ids), a word embedding
    # joined to the character CNN's output, which branch the highway's sigmoid gate scales ("transform":
    # bilm-tf; "input": AllenNLP's parametrisation), and the forget bias added at run time (bilm-tf: 1.0)
    char_vocab_size: Annotated[Integer, Field(ge=0)] = 0
    word_vocab_size: Annotated[Integer, Field(ge=0)] = 0
    word_dim: Annotated[Integer, Field(ge=0)] = 0
    highway_gate: Literal["transform", "input"] = "transform"
    forget_bias: Annotated[float, Field(allow_inf_nan=False)] = 1.0
    # everything else from options.json, kept for round trips
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    # bilm-tf's training dropout: checked and kept in `extra` (the biLM's own dropout is a pretraining setting)
    dropout: InitVar[Optional[Annotated[float, Field(ge=0.0, lt=1.0, allow_inf_nan=False)]]] = None

    def __post_init__(self, dropout: Optional[float]) -> None:
        if dropout is not None:
            self.extra = {**self.extra, "dropout": dropout}

    @model_validator(mode="after")
    def _filters_fit_in_a_token(self) -> "BiLMOptions":
        for width, _ in self.filters:
            if width > self.max_characters_per_token:
                raise ValueError(f"has width {width} > max_characters_per_token")
        return self

    @model_validator(mode="after")
    def _word_embedding_has_a_vocabulary(self) -> "BiLMOptions":
        if (self.word_dim > 0) != (self.word_vocab_size > 0):
            raise ValueError("needs both or neither of word_dim and word_vocab_size")
        if self.word_dim and not self.char_vocab_size:
            raise ValueError("has a word embedding (word_dim) but no character vocabulary (char_vocab_size)")
        return self

    @property
    def bilm_tf_layout(self) -> bool:
        """Whether bilm-tf's options.json + HDF5 can hold this model (no ELMoForManyLangs feature)."""
        return (
            not self.char_vocab_size
            and not self.word_dim
            and self.highway_gate == "transform"
            and self.forget_bias == 1.0
        )

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every exposed layer: [forward; backward] = 2P."""
        return 2 * self.projection_dim

    @property
    def n_output_layers(self) -> int:
        return self.n_layers + 1

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "options") -> "BiLMOptions":
        """Parse an options.json dict against the schema; every problem is reported at once, each with
        its key, in one `OptionsError` that names the source."""
        if not isinstance(data, dict):
            raise OptionsError(f"{source}: expected a JSON object with 'char_cnn' and 'lstm' sections")
        data = copy.deepcopy(data)
        problems: dict[str, str] = {}  # by key in options.json
        sections: dict[str, Optional[dict[str, Any]]] = {"": data}
        for path in SECTIONS:
            parent_path, _, key = path.rpartition(".")
            parent = sections[parent_path]
            value = _MISSING if parent is None else parent.pop(key, _MISSING)
            if value is _MISSING and parent is not None:
                problems[path] = f"missing option '{path}' (a section of options.json)"
            elif value is not _MISSING and not isinstance(value, dict):
                problems[path] = (
                    f"option '{path}' is {_shown(value)}; expected a JSON object (a section of options.json)"
                )
            sections[path] = value if isinstance(value, dict) else None
        values: dict[str, Any] = {}
        for name, path in FILE_KEYS.items():
            section_path, _, key = path.rpartition(".")
            section = sections[section_path]
            if section is None:  # the section itself was missing or wrong: already reported
                continue
            if key in section:
                values[name] = section[key] if name in KEPT_IN_EXTRA else section.pop(key)
            elif name in ABSENT_IN_FILE:
                values[name] = ABSENT_IN_FILE[name]
            else:
                problems[path] = f"missing option '{path}'"
        if values.get("n_tokens_vocab", 0) is None:  # null: no softmax, as absent
            values["n_tokens_vocab"] = 0
        extra = {"__char_cnn__": sections["char_cnn"] or {}, "__lstm__": sections["lstm"] or {}, **data}
        options: Optional[BiLMOptions] = None
        try:
            options = cls(**values, extra=extra)
        except ValidationError as error:
            problems.update(_problems(error, values))
        if problems or options is None:
            order = [*SECTIONS, *FILE_KEYS.values()]
            _raise(source, [problems[key] for key in sorted(problems, key=order.index)])
        assert options is not None
        return options

    def to_dict(self) -> dict[str, Any]:
        """The options.json dict, with the keys this package does not use written back."""
        extra = copy.deepcopy(self.extra)
        cnn_extra = extra.pop("__char_cnn__", {})
        lstm_extra = extra.pop("__lstm__", {})
        lstm: dict[str, Any] = {
            "dim": self.lstm_dim,
            "projection_dim": self.projection_dim,
            "n_layers": self.n_layers,
            "use_skip_connections": self.use_skip_connections,
        }
        if self.cell_clip is not None:
            lstm["cell_clip"] = _plain_number(self.cell_clip)
        if self.proj_clip is not None:
            lstm["proj_clip"] = _plain_number(self.proj_clip)
        lstm.update(lstm_extra)
        cnn: dict[str, Any] = {
            "embedding": {"dim": self.char_embedding_dim},
            "filters": [[w, n] for w, n in self.filters],
            "n_highway": self.n_highway,
            "n_characters": self.n_characters,
            "max_characters_per_token": self.max_characters_per_token,
            "activation": self.activation,
        }
        cnn.update(cnn_extra)
        for name in NOT_BILM_TF:  # written only where they differ from bilm-tf's, so its files round trip
            value = getattr(self, name)
            if value != ABSENT_IN_FILE[name]:
                section = lstm if FILE_KEYS[name].startswith("lstm.") else cnn
                section[FILE_KEYS[name].rpartition(".")[2]] = _plain_number(value) if name == "forget_bias" else value
        out: dict[str, Any] = {"lstm": lstm, "char_cnn": cnn}
        if self.n_tokens_vocab:
            out["n_tokens_vocab"] = self.n_tokens_vocab
        out.update(extra)
        return out

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "BiLMOptions":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"options file not found: {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise OptionsError(f"{path}: not a valid JSON options file ({err})") from None
        if not isinstance(data, dict):
            raise OptionsError(f"{path}: expected a JSON object with 'char_cnn' and 'lstm' sections")
        return cls.from_dict(data, source=str(path))

    def to_file(self, path: Union[str, Path]) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")


# The options' names (BiLMOptions' attributes), in the schema's order: what a config may set.
OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(BiLMOptions) if f.name != "extra")

# Where each option is in options.json (bilm-tf's layout), its sections first.
SECTIONS = ("char_cnn", "lstm", "char_cnn.embedding")
FILE_KEYS = {
    "char_embedding_dim": "char_cnn.embedding.dim",
    "filters": "char_cnn.filters",
    "n_highway": "char_cnn.n_highway",
    "activation": "char_cnn.activation",
    "n_characters": "char_cnn.n_characters",
    "max_characters_per_token": "char_cnn.max_characters_per_token",
    "lstm_dim": "lstm.dim",
    "projection_dim": "lstm.projection_dim",
    "n_layers": "lstm.n_layers",
    "cell_clip": "lstm.cell_clip",
    "proj_clip": "lstm.proj_clip",
    "use_skip_connections": "lstm.use_skip_connections",
    "n_tokens_vocab": "n_tokens_vocab",
    "char_vocab_size": "char_cnn.char_vocab_size",
    "word_vocab_size": "char_cnn.word_vocab_size",
    "word_dim": "char_cnn.word_dim",
    "highway_gate": "char_cnn.highway_gate",
    "forget_bias": "lstm.forget_bias",
    "dropout": "dropout",
}
NOT_BILM_TF = ("char_vocab_size", "word_vocab_size", "word_dim", "highway_gate", "forget_bias")
# What an option absent from options.json means: bilm-tf's defaults, which for the clips and the skip
# connections are not BiLMOptions' own. Every other option is required there.
ABSENT_IN_FILE: dict[str, Any] = {
    "cell_clip": None,
    "proj_clip": None,
    "use_skip_connections": False,
    "n_tokens_vocab": 0,
    "char_vocab_size": 0,
    "word_vocab_size": 0,
    "word_dim": 0,
    "highway_gate": "transform",
    "forget_bias": 1.0,
    "dropout": None,
}
KEPT_IN_EXTRA = ("dropout",)  # checked, and written back where it was

_MISSING = object()
_HINTS = typing.get_type_hints(BiLMOptions, include_extras=True)


def _problems(error: ValidationError, values: dict[str, Any]) -> dict[str, str]:
    """The schema's errors by key in options.json, one a key, each with the value the file holds."""
    problems: dict[str, str] = {}
    for detail in error.errors():
        if detail["loc"]:
            name = str(detail["loc"][0])
        else:  # a check of several options: named by the option it is about
            name = "word_dim" if "word" in str(detail["ctx"]["error"]) else "filters"
        path = FILE_KEYS[name]
        if detail["type"] == "missing" or path in problems:  # a missing key is reported by from_dict
            continue
        if not detail["loc"]:
            problems[path] = f"option '{path}' {detail['ctx']['error']}"
        else:
            problems[path] = f"option '{path}' is {_shown(values[name])}; expected {_expected(name)}"
    return problems


def _expected(name: str) -> str:
    """What the schema accepts for an option, in words: "an integer >= 1", "true or false", ..."""
    if name == "filters":
        return "a non-empty list of [width, n_filters] pairs of integers >= 1"
    hint = _HINTS[name]
    hint = hint.type if isinstance(hint, InitVar) else hint
    nullable = typing.get_origin(hint) is Union
    if nullable:
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    bounds: list[str] = []
    if typing.get_origin(hint) is Annotated:
        hint, *metadata = typing.get_args(hint)
        for constraint in (c for m in metadata for c in getattr(m, "metadata", [m])):  # Field(...) or Ge, Lt
            if hasattr(constraint, "ge"):
                bounds.append(f">= {constraint.ge}")
            elif hasattr(constraint, "lt"):
                bounds.append(f"< {constraint.lt}")
    if hint is bool:
        return "true or false"
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(_shown(choice) for choice in typing.get_args(hint))
    kind = "an integer" if hint is int else "a number"
    return f"{kind} {' and '.join(bounds)}" + (", or null" if nullable else "")


def _raise(source: str, problems: list[str]) -> None:
    if not problems:
        raise OptionsError(f"{source}: the options do not describe a biLM")
    if len(problems) == 1:
        raise OptionsError(f"{source}: {problems[0]}")
    listed = "".join(f"\n  - {problem}" for problem in problems)
    raise OptionsError(f"{source}: {len(problems)} problems in the options:{listed}")


def _shown(value: Any) -> str:
    """A value as it would be written in options.json."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _plain_number(value: float) -> Union[int, float]:
    return int(value) if float(value).is_integer() else value


# Named configurations from the paper and AllenNLP's released models (for benchmarks and pretraining).
PAPER_FILTERS = [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)]


def full_options(**overrides: Any) -> BiLMOptions:
    """The paper's model: 2x4096_512_2048cnn_2xhighway."""
    kwargs: dict[str, Any] = dict(filters=PAPER_FILTERS, n_highway=2, lstm_dim=4096, projection_dim=512)
    kwargs.update(overrides)
    return BiLMOptions(**kwargs)


def small_options(**overrides: Any) -> BiLMOptions:
    """AllenNLP's "small" model: 2x1024_128_2048cnn_1xhighway."""
    kwargs: dict[str, Any] = dict(filters=PAPER_FILTERS, n_highway=1, lstm_dim=1024, projection_dim=128)
    kwargs.update(overrides)
    return BiLMOptions(**kwargs)
