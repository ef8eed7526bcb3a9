"""The biLM's configuration: bilm-tf/AllenNLP's `options.json` schema, validated once.

`BiLMOptions` is a strict pydantic model shaped like the file (an integral float such as 4096.0 counts as an
integer); unknown keys are kept and written back. Every problem is reported at once, at its key. The biLM
reads and Python makes the options flat (`options.lstm_dim`).
"""

import functools
import json
import operator
import typing
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, Optional, TypeVar, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    model_validator,
)

from .. import chars
from ..errors import ModelFileError, reading

T = TypeVar("T")


class OptionsError(ModelFileError):
    """An options.json that is missing a key or holds a value the biLM cannot use."""


class _Problem(ValueError):
    """A check of several options, raised by a section's validator: `key` is the option it is about."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _integral(value: Any) -> Any:
    """4096.0 -> 4096; anything else as it is (for the strict integer check)."""
    return int(value) if type(value) is float and value.is_integer() else value


def _not_float(value: Any) -> Any:
    if isinstance(value, float):
        raise ValueError(f"{value} is a float: expected the integer 261 or 262")
    return value


def _pairs(value: Any) -> Any:
    """[[width, n], ...] as JSON has it -> [(width, n), ...]; anything else as it is."""
    return [tuple(pair) if isinstance(pair, list) else pair for pair in value] if isinstance(value, list) else value


def _plain_number(value: float) -> Union[int, float]:
    """3.0 is written 3, as bilm-tf's files have it."""
    return int(value) if float(value).is_integer() else value


Integer = Annotated[int, BeforeValidator(_integral)]
Positive = Annotated[Integer, Field(ge=1)]
Count = Annotated[Integer, Field(ge=0)]
Number = Annotated[float, Field(allow_inf_nan=False), PlainSerializer(_plain_number)]
Activation = Literal["relu", "tanh"]
NumberOfCharacters = Annotated[Literal[261, 262], BeforeValidator(_not_float)]  # 261: without the "no token" id
Filters = Annotated[list[tuple[Positive, Positive]], Field(min_length=1), BeforeValidator(_pairs)]
Clip = Annotated[Number, Field(ge=0.0)]


class _Section(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class Embedding(_Section):
    dim: Positive


class CharCnn(_Section):
    """options.json's `char_cnn`; the keys after `activation` are ELMoForManyLangs-style models' (absent:
    bilm-tf's): a character vocabulary (0 = byte ids), a word embedding, the branch the highway's gate scales."""

    embedding: Embedding
    filters: Filters
    n_highway: Count
    n_characters: NumberOfCharacters
    max_characters_per_token: Annotated[Integer, Field(ge=3)]
    activation: Activation
    char_vocab_size: Count = 0
    word_vocab_size: Count = 0
    word_dim: Count = 0
    highway_gate: Literal["transform", "input"] = "transform"

    @model_validator(mode="after")
    def _consistent(self) -> "CharCnn":
        for width, _ in self.filters:
            if width > self.max_characters_per_token:
                raise _Problem("filters", f"has width {width} > max_characters_per_token")
        if (self.word_dim > 0) != (self.word_vocab_size > 0):
            raise _Problem("word_dim", "needs both or neither of word_dim and word_vocab_size")
        if self.word_dim and not self.char_vocab_size:
            raise _Problem("word_dim", "has a word embedding (word_dim) but no character vocabulary (char_vocab_size)")
        return self


class Lstm(_Section):
    """options.json's `lstm`; an absent (or null) clip is none, and so are absent skip connections, as in bilm-tf."""

    dim: Positive
    projection_dim: Positive
    n_layers: Positive
    use_skip_connections: bool
    cell_clip: Optional[Clip] = None
    proj_clip: Optional[Clip] = None
    forget_bias: Number = 1.0

    @model_validator(mode="before")
    @classmethod
    def _bilm_tf_default(cls, data: Any) -> Any:
        """Absent skip connections are bilm-tf's default (none), and are written back."""
        if isinstance(data, dict) and "use_skip_connections" not in data:
            return {**data, "use_skip_connections": False}
        return data


class _Flat(Generic[T]):
    """One flat option: where it is in options.json, and its default in Python."""

    def __init__(self, path: str, default: Any = ...) -> None:
        self.path, self.keys, self.default = path, tuple(path.split(".")), default

    def __get__(self, options: Any, owner: Any = None) -> T:
        return typing.cast(T, operator.attrgetter(self.path)(options))


class BiLMOptions(_Section):
    """Dimensions and switches of a biLM, shaped as bilm-tf's options.json, and their schema."""

    model_config = ConfigDict(strict=True, extra="allow", ignored_types=(_Flat,))

    lstm: Lstm
    char_cnn: CharCnn
    # language-model head (pretraining); 0 (or null) = no softmax
    n_tokens_vocab: Annotated[Count, BeforeValidator(lambda value: 0 if value is None else value)] = 0

    filters = _Flat[list[tuple[int, int]]]("char_cnn.filters")
    char_embedding_dim = _Flat[int]("char_cnn.embedding.dim", 16)
    n_highway = _Flat[int]("char_cnn.n_highway", 2)
    activation = _Flat[str]("char_cnn.activation", "relu")
    n_characters = _Flat[int]("char_cnn.n_characters", chars.N_CHARACTERS)
    max_characters_per_token = _Flat[int]("char_cnn.max_characters_per_token", chars.MAX_CHARACTERS_PER_TOKEN)
    lstm_dim = _Flat[int]("lstm.dim", 4096)
    projection_dim = _Flat[int]("lstm.projection_dim", 512)
    n_layers = _Flat[int]("lstm.n_layers", 2)
    cell_clip = _Flat[Optional[float]]("lstm.cell_clip", 3.0)  # None: no clipping
    proj_clip = _Flat[Optional[float]]("lstm.proj_clip", 3.0)
    use_skip_connections = _Flat[bool]("lstm.use_skip_connections", True)
    char_vocab_size = _Flat[int]("char_cnn.char_vocab_size", 0)
    word_vocab_size = _Flat[int]("char_cnn.word_vocab_size", 0)
    word_dim = _Flat[int]("char_cnn.word_dim", 0)
    highway_gate = _Flat[str]("char_cnn.highway_gate", "transform")
    forget_bias = _Flat[float]("lstm.forget_bias", 1.0)

    def __init__(self, **data: Any) -> None:
        """From options.json's sections, or from flat names (errors then name the flat names)."""
        try:
            super().__init__(**data)
        except ValidationError as err:
            if not _is_flat(data):
                raise
            raise ValidationError.from_exception_data(err.title, [_flat_error(e) for e in err.errors()]) from None

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        if not _is_flat(data):
            return data
        nested: dict[str, Any] = {"char_cnn": {"embedding": {}}, "lstm": {}}
        for name, flat in FLAT.items():
            value = data.get(name, flat.default)
            if value is not ...:
                *sections, key = flat.keys
                functools.reduce(operator.getitem, sections, nested)[key] = value
        return {**nested, **{key: value for key, value in data.items() if key not in FLAT}}

    @model_validator(mode="after")
    def _dropout(self) -> "BiLMOptions":
        """bilm-tf's training dropout: checked and kept where it is (the biLM's own is a pretraining setting)."""
        dropout = (self.model_extra or {}).get("dropout")
        if dropout is not None and not (type(dropout) in (int, float) and 0 <= dropout < 1):
            raise _Problem("dropout", f"is {_shown(dropout)}: expected a number >= 0 and < 1")
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
    def from_dict(cls, data: Any) -> "BiLMOptions":
        """Parse an options.json dict: every problem at once, at its key, in one `OptionsError`."""
        if not isinstance(data, dict):
            raise OptionsError("expected a JSON object with 'char_cnn' and 'lstm' sections")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            problems = [_problem(error) for error in err.errors()]
        if len(problems) == 1:
            raise OptionsError(problems[0])
        listed = "".join(f"\n  - {problem}" for problem in problems)
        raise OptionsError(f"{len(problems)} problems in the options:{listed}")

    def to_dict(self) -> dict[str, Any]:
        """The options.json dict: unknown keys written back, options at bilm-tf's value left out."""
        return self.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "BiLMOptions":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"options file not found: {path}")
        with reading(str(path)):
            return cls.from_bytes(path.read_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> "BiLMOptions":
        """Parse an options.json file's bytes (the caller names the file: `errors.reading`)."""
        try:
            parsed = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise OptionsError(f"not a valid JSON options file ({err})") from None
        return cls.from_dict(parsed)


FLAT: dict[str, _Flat[Any]] = {name: value for name, value in vars(BiLMOptions).items() if isinstance(value, _Flat)}
# where each option is in options.json
FILE_KEYS = {**{name: flat.path for name, flat in FLAT.items()}, "n_tokens_vocab": "n_tokens_vocab"}
# The options' names: what a config may set.
OPTION_NAMES: tuple[str, ...] = (*FLAT, "n_tokens_vocab")


def _is_flat(data: Any) -> bool:
    return isinstance(data, dict) and "char_cnn" not in data and "lstm" not in data and any(k in FLAT for k in data)


def _flat_error(error: Any) -> Any:
    """A validation error of flat options, located at the flat name rather than in options.json."""
    loc = tuple(error["loc"])
    for name, flat in FLAT.items():
        if loc[: len(flat.keys)] == flat.keys:
            return {**error, "loc": (name, *loc[len(flat.keys) :])}
    return error


def _problem(error: Any) -> str:
    """One problem of a file, at its key in options.json (pydantic's location) and with its value."""
    loc = [str(part) for part in error["loc"]]
    problem = error.get("ctx", {}).get("error")
    if isinstance(problem, _Problem):
        return f"option '{'.'.join([*loc, problem.key])}' {problem}"
    if error["type"] == "missing":
        return f"missing option '{'.'.join(loc)}'"
    return f"option '{'.'.join(loc)}' is {_shown(error['input'])}: {error['msg']}"


def _shown(value: Any) -> str:
    """A value as it would be written in options.json."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


# Named configurations from the paper and AllenNLP's released models (for benchmarks and pretraining).
PAPER_FILTERS = [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)]


def full_options(**overrides: Any) -> BiLMOptions:
    """The paper's model: 2x4096_512_2048cnn_2xhighway."""
    return BiLMOptions(**(dict(filters=PAPER_FILTERS, n_highway=2, lstm_dim=4096, projection_dim=512) | overrides))


def small_options(**overrides: Any) -> BiLMOptions:
    """AllenNLP's "small" model: 2x1024_128_2048cnn_1xhighway."""
    return BiLMOptions(**(dict(filters=PAPER_FILTERS, n_highway=1, lstm_dim=1024, projection_dim=128) | overrides))
