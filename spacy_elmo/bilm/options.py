"""The biLM's configuration: the bilm-tf/AllenNLP `options.json` schema, validated.

Keeping the reference schema (rather than a new one) means an `options.json` from bilm-tf or AllenNLP
loads unchanged, and an exported model's options load there. Keys this package does not use are kept
in `extra` so that a round trip writes them back.
"""
import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from .. import chars

ACTIVATIONS = ("relu", "tanh")


class OptionsError(ValueError):
    """An options.json that is missing a key or holds a value the biLM cannot use."""


@dataclass
class BiLMOptions:
    """Dimensions and switches of a biLM, named as in bilm-tf's options.json."""

    # char_cnn
    filters: List[Tuple[int, int]]
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
    extra: Dict[str, Any] = field(default_factory=dict)

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
    def from_dict(cls, data: Dict[str, Any], source: str = "options") -> "BiLMOptions":
        """Parse an options.json dict; a missing required key is an error naming it and the source."""
        data = copy.deepcopy(data)

        def take(section: Dict[str, Any], key: str, path: str, required: bool = True, default: Any = None) -> Any:
            if key not in section:
                if required:
                    raise OptionsError(f"{source}: missing option '{path}'")
                return default
            return section.pop(key)

        for section in ("char_cnn", "lstm"):
            if not isinstance(data.get(section), dict):
                raise OptionsError(f"{source}: missing option '{section}' (a section of options.json)")
        cnn = data.pop("char_cnn")
        lstm = data.pop("lstm")
        embedding = take(cnn, "embedding", "char_cnn.embedding")
        if not isinstance(embedding, dict) or "dim" not in embedding:
            raise OptionsError(f"{source}: missing option 'char_cnn.embedding.dim'")
        filters = take(cnn, "filters", "char_cnn.filters")
        if not isinstance(filters, list) or not all(isinstance(f, (list, tuple)) and len(f) == 2 for f in filters):
            raise OptionsError(f"{source}: option 'char_cnn.filters' must be a list of [width, n_filters] pairs")
        if "dropout" in data:
            data["dropout"] = float(data["dropout"])
        options = cls(
            filters=[tuple(f) for f in filters],
            char_embedding_dim=int(embedding["dim"]),
            n_highway=int(take(cnn, "n_highway", "char_cnn.n_highway")),
            activation=str(take(cnn, "activation", "char_cnn.activation")),
            n_characters=int(take(cnn, "n_characters", "char_cnn.n_characters")),
            max_characters_per_token=int(take(cnn, "max_characters_per_token", "char_cnn.max_characters_per_token")),
            lstm_dim=int(take(lstm, "dim", "lstm.dim")),
            projection_dim=int(take(lstm, "projection_dim", "lstm.projection_dim")),
            n_layers=int(take(lstm, "n_layers", "lstm.n_layers")),
            cell_clip=_optional_float(take(lstm, "cell_clip", "lstm.cell_clip", required=False)),
            proj_clip=_optional_float(take(lstm, "proj_clip", "lstm.proj_clip", required=False)),
            use_skip_connections=bool(take(lstm, "use_skip_connections", "lstm.use_skip_connections", False, False)),
            n_tokens_vocab=int(data.pop("n_tokens_vocab", 0) or 0),
            extra={"__char_cnn__": cnn, "__lstm__": lstm, **data},
        )
        options.validate(source)
        return options

    def to_dict(self) -> Dict[str, Any]:
        """The options.json dict, with the keys this package does not use written back."""
        extra = copy.deepcopy(self.extra)
        cnn_extra = extra.pop("__char_cnn__", {})
        lstm_extra = extra.pop("__lstm__", {})
        lstm: Dict[str, Any] = {
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
        cnn: Dict[str, Any] = {
            "embedding": {"dim": self.char_embedding_dim},
            "filters": [[w, n] for w, n in self.filters],
            "n_highway": self.n_highway,
            "n_characters": self.n_characters,
            "max_characters_per_token": self.max_characters_per_token,
            "activation": self.activation,
        }
        cnn.update(cnn_extra)
        out: Dict[str, Any] = {"lstm": lstm, "char_cnn": cnn}
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


def _optional_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _plain_number(value: float) -> Union[int, float]:
    return int(value) if float(value).is_integer() else value


# Named configurations from the paper and AllenNLP's released models (for benchmarks and pretraining).
PAPER_FILTERS = [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)]


def full_options(**overrides: Any) -> BiLMOptions:
    """The paper's model: 2x4096_512_2048cnn_2xhighway."""
    kwargs: Dict[str, Any] = dict(filters=PAPER_FILTERS, n_highway=2, lstm_dim=4096, projection_dim=512)
    kwargs.update(overrides)
    return BiLMOptions(**kwargs)


def small_options(**overrides: Any) -> BiLMOptions:
    """AllenNLP's "small" model: 2x1024_128_2048cnn_1xhighway."""
    kwargs: Dict[str, Any] = dict(filters=PAPER_FILTERS, n_highway=1, lstm_dim=1024, projection_dim=128)
    kwargs.update(overrides)
    return BiLMOptions(**kwargs)
