"""The biLM's configuration: the bilm-tf/AllenNLP `options.json` schema, validated.

Keeping the reference schema (rather than a new one) means an `options.json` from bilm-tf or AllenNLP
loads unchanged, and an exported model's options load there. Keys this package does not use are kept
in `extra` so that a round trip writes them back.
"""

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from .. import chars

ACTIVATIONS = ("relu", "tanh")


class OptionsError(ValueError):
    """An options.json that is missing a key or holds a value the biLM cannot use."""


@dataclass
class BiLMOptions:
    """Dimensions and switches of a biLM, named as in bilm-tf's options.json."""

    # char_cnn
    filters: list[tuple[int, int]]
    char_embedding_dim: int = 16
    n_highway: int = 2
    activation: str = "relu"
    n_characters: int = chars.N_CHARACTERS
    max_characters_per_token: int = chars.MAX_CHARACTERS_PER_TOKEN
    # lstm
    lstm_dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: Optional[float] = 3.0
    proj_clip: Optional[float] = 3.0
    use_skip_connections: bool = True
    # language-model head (pretraining); 0 = no softmax
    n_tokens_vocab: int = 0
    # everything else from options.json, kept for round trips
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.filters = [(int(w), int(n)) for w, n in self.filters]
        self.validate()

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

    def validate(self, source: str = "options") -> None:
        def bad(key: str, why: str) -> OptionsError:
            return OptionsError(f"{source}: option '{key}' {why}")

        if not self.filters:
            raise bad("char_cnn.filters", "is empty: the character CNN needs at least one [width, n_filters]")
        for width, n in self.filters:
            if width < 1 or n < 1:
                raise bad("char_cnn.filters", f"has [{width}, {n}]: widths and filter counts must be >= 1")
            if width > self.max_characters_per_token:
                raise bad("char_cnn.filters", f"has width {width} > max_characters_per_token")
        if self.activation not in ACTIVATIONS:
            raise bad("char_cnn.activation", f"is {self.activation!r}; expected one of {ACTIVATIONS}")
        for key, value, least in (
            ("char_cnn.embedding.dim", self.char_embedding_dim, 1),
            ("char_cnn.n_highway", self.n_highway, 0),
            ("char_cnn.max_characters_per_token", self.max_characters_per_token, 3),
            ("lstm.dim", self.lstm_dim, 1),
            ("lstm.projection_dim", self.projection_dim, 1),
            ("lstm.n_layers", self.n_layers, 1),
            ("n_tokens_vocab", self.n_tokens_vocab, 0),
        ):
            if int(value) != value or value < least:
                raise bad(key, f"is {value!r}; expected an integer >= {least}")
        if self.n_characters not in (chars.N_CHARACTERS, chars.N_CHARACTERS - 1):
            raise bad("char_cnn.n_characters", f"is {self.n_characters}; expected 261 or 262")
        for key, clip in (("lstm.cell_clip", self.cell_clip), ("lstm.proj_clip", self.proj_clip)):
            if clip is not None and clip < 0:
                raise bad(key, f"is {clip}; a clip value must be >= 0 (leave it out for no clipping)")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "options") -> "BiLMOptions":
        """Parse an options.json dict, checking every key's type and range against bilm-tf's schema.

        Nothing is coerced (128.9 is not 128, "false" is not a boolean); every problem is reported at
        once, each with its key, in one `OptionsError` that names the source.
        """
        data = copy.deepcopy(data)
        read = _OptionReader(source)
        cnn = read.section(data, "char_cnn")
        lstm = read.section(data, "lstm")
        embedding = read.section(cnn, "embedding", "char_cnn.embedding")
        values: dict[str, Any] = dict(
            char_embedding_dim=read.integer(embedding, "dim", "char_cnn.embedding.dim", least=1),
            filters=read.filters(cnn, "filters", "char_cnn.filters"),
            n_highway=read.integer(cnn, "n_highway", "char_cnn.n_highway", least=0),
            activation=read.choice(cnn, "activation", "char_cnn.activation", ACTIVATIONS),
            n_characters=read.choice(cnn, "n_characters", "char_cnn.n_characters", (261, 262)),
            max_characters_per_token=read.integer(
                cnn, "max_characters_per_token", "char_cnn.max_characters_per_token", least=3
            ),
            lstm_dim=read.integer(lstm, "dim", "lstm.dim", least=1),
            projection_dim=read.integer(lstm, "projection_dim", "lstm.projection_dim", least=1),
            n_layers=read.integer(lstm, "n_layers", "lstm.n_layers", least=1),
            cell_clip=read.number(lstm, "cell_clip", "lstm.cell_clip", least=0.0, required=False),
            proj_clip=read.number(lstm, "proj_clip", "lstm.proj_clip", least=0.0, required=False),
            use_skip_connections=read.boolean(lstm, "use_skip_connections", "lstm.use_skip_connections", False),
            n_tokens_vocab=read.integer(data, "n_tokens_vocab", "n_tokens_vocab", least=0, required=False) or 0,
        )
        if "dropout" in data:
            data["dropout"] = read.number(data, "dropout", "dropout", least=0.0, below=1.0, keep=True)
        read.raise_problems()
        options = cls(**values, extra={"__char_cnn__": cnn or {}, "__lstm__": lstm or {}, **data})
        options.validate(source)
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


class _OptionReader:
    """Takes typed values out of an options.json dict, collecting every problem (with its key)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []

    def raise_problems(self) -> None:
        if len(self.problems) == 1:
            raise OptionsError(f"{self.source}: {self.problems[0]}")
        if self.problems:
            listed = "".join(f"\n  - {problem}" for problem in self.problems)
            raise OptionsError(f"{self.source}: {len(self.problems)} problems in the options:{listed}")

    def _take(self, section: Optional[dict[str, Any]], key: str, path: str, required: bool, keep: bool = False) -> Any:
        if section is None:  # the section itself was missing or wrong: already reported
            return _MISSING
        if key not in section:
            if required:
                self.problems.append(f"missing option '{path}'")
            return _MISSING
        return section[key] if keep else section.pop(key)

    def _bad(self, path: str, value: Any, expected: str) -> None:
        self.problems.append(f"option '{path}' is {_shown(value)}; expected {expected}")

    def section(self, data: Optional[dict[str, Any]], key: str, path: str = "") -> Optional[dict[str, Any]]:
        if data is None:
            return None
        value = data.pop(key, _MISSING)
        if value is _MISSING:
            self.problems.append(f"missing option '{path or key}' (a section of options.json)")
            return None
        if not isinstance(value, dict):
            self._bad(path or key, value, "a JSON object (a section of options.json)")
            return None
        return value

    def integer(self, section: Optional[dict[str, Any]], key: str, path: str, least: int, required: bool = True) -> Any:
        value = self._take(section, key, path, required)
        if value is _MISSING or (value is None and not required):
            return None
        if not _is_integer(value) or value < least:
            self._bad(path, value, f"an integer >= {least}")
            return None
        return int(value)

    def number(
        self,
        section: Optional[dict[str, Any]],
        key: str,
        path: str,
        least: float,
        below: Optional[float] = None,
        required: bool = True,
        keep: bool = False,
    ) -> Any:
        """A number; null or absent (when not required) means "not set" (for clips: no clipping)."""
        value = self._take(section, key, path, required, keep)
        if value is _MISSING or value is None:
            return None
        in_range = _is_number(value) and value >= least and (below is None or value < below)
        if not in_range or not math.isfinite(value):
            upper = f" and < {below}" if below is not None else ""
            self._bad(path, value, f"a number >= {least}{upper}" + (", or null" if not required else ""))
            return None
        return float(value)

    def boolean(self, section: Optional[dict[str, Any]], key: str, path: str, default: bool) -> bool:
        value = self._take(section, key, path, required=False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self._bad(path, value, "true or false")
            return default
        return value

    def choice(self, section: Optional[dict[str, Any]], key: str, path: str, allowed: tuple[Any, ...]) -> Any:
        value = self._take(section, key, path, required=True)
        if value is _MISSING:
            return None
        if isinstance(value, bool) or value not in allowed or type(value) is float:
            self._bad(path, value, f"one of {', '.join(_shown(a) for a in allowed)}")
            return None
        return value

    def filters(self, section: Optional[dict[str, Any]], key: str, path: str) -> list[tuple[int, int]]:
        value = self._take(section, key, path, required=True)
        if value is _MISSING:
            return []
        pairs = value if isinstance(value, list) else None
        if not pairs or not all(
            isinstance(p, list) and len(p) == 2 and all(_is_integer(x) and x >= 1 for x in p) for p in pairs
        ):
            self._bad(path, value, "a non-empty list of [width, n_filters] pairs of integers >= 1")
            return []
        return [(int(w), int(n)) for w, n in pairs]


_MISSING = object()


def _is_integer(value: Any) -> bool:
    """An int, or a float with no fractional part (4096.0); never a bool or a string."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
