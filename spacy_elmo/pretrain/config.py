"""The pretraining config: spaCy/thinc config format, defaults filled in, overrides applied, validated once.

A user config only needs what differs from spacy_elmo/configs/pretrain_default.cfg. Every problem is
reported at once, each with its key, naming the config file.
"""

from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Union

import torch
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from thinc.api import Config, ConfigValidationError, Optimizer, registry

from ..bilm.options import OPTION_NAMES, BiLMOptions
from ..disk import PathLike
from .corpus import CorpusSettings, Format
from .optimizers import OptimizerFactory
from .schedule import LearnRate

DEFAULT_CONFIG = Path(__file__).parent.parent / "configs" / "pretrain_default.cfg"


class PretrainConfigError(ValueError):
    """A pretraining config value that cannot be used."""


def load_config(
    path: Optional[PathLike] = None, overrides: Optional[dict[str, Any]] = None, text: Optional[str] = None
) -> Config:
    """The config at `path` (or in `text`) over the defaults, with `overrides` ({"training.max_steps": 100})."""
    defaults = Config().from_disk(DEFAULT_CONFIG, interpolate=False)
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"pretraining config not found: {path}")
        text = path.read_text(encoding="utf-8")
    merged = defaults.merge(Config().from_str(text or "", interpolate=False))
    for key in overrides or {}:
        section, _, leaf = key.rpartition(".")
        node: Any = merged
        for part in section.split(".") if section else []:
            if not isinstance(node, dict) or part not in node:
                raise PretrainConfigError(f"override --{key}: no section [{section}] in the pretraining config")
            node = node[part]
        if leaf not in node:
            raise PretrainConfigError(f"override --{key}: unknown setting")
    return Config().from_str(merged.to_str(), overrides=overrides or {}, interpolate=True)


def _null_is_zero(value: Any) -> Any:
    return 0 if value is None else value


Count = Annotated[int, BeforeValidator(_null_is_zero), Field(ge=0)]
"""A count or an interval in steps, where 0 (or null) means none."""
Minutes = Annotated[float, BeforeValidator(_null_is_zero), Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
Files = Union[str, list[str]]


def _torch_optimizers_only(value: OptimizerFactory) -> OptimizerFactory:
    if isinstance(value, Optimizer):
        raise ValueError(
            "is a thinc optimizer (for `spacy train`); pretraining trains with torch optimizers: "
            "spacy-elmo.Adam.v1, spacy-elmo.Adagrad.v1 or spacy-elmo.SGD.v1"
        )
    return value


class _Section(BaseModel):
    """Values as written (nothing coerced: 1.5 is not an integer, "false" is not a boolean), no unknown keys."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class PathsSettings(_Section):
    """[paths]: the variables the other sections refer to (a config may add its own)."""

    model_config = ConfigDict(extra="allow")
    train: Optional[Files] = None
    dev: Optional[Files] = None
    vocab: Optional[str] = None
    init_from: Optional[str] = None


class CorpusSection(_Section):
    """[corpus]: the training and dev text and how it is tokenized (corpus.py)."""

    train: Files
    dev: Optional[Files]
    format: Format
    text_field: str
    lang: str
    max_train_tokens: Optional[Positive]
    max_dev_tokens: Optional[Positive]
    cache_dir: Optional[str]

    @field_validator("train", mode="before")
    @classmethod
    def _train_is_set(cls, value: Any) -> Any:
        if not value:
            raise ValueError("is not set (give --paths.train PATH or set it in the config)")
        return value

    def settings(self, max_tokens: Optional[int]) -> CorpusSettings:
        return CorpusSettings(format=self.format, text_field=self.text_field, lang=self.lang, max_tokens=max_tokens)


class VocabSection(_Section):
    """[vocab]: a bilm-tf vocabulary file, or the corpus's most frequent words."""

    file: Optional[str]
    max_size: Optional[Positive]
    min_count: Count


class TrainingSection(_Section):
    """[training]: the device, the batches, when to stop, log, evaluate and checkpoint, and the optimizer."""

    seed: Count
    device: str
    n_threads: Count  # 0: torch's default, at most the usable CPUs
    window: Positive
    batch_size: Positive
    # when to stop: the first limit reached (0: no such limit)
    max_steps: Count
    max_epochs: Count
    max_minutes: Minutes
    dropout: Annotated[float, Field(ge=0, lt=1)]
    grad_clip: Minutes  # 0: no clipping
    n_negatives: Count  # 0 (or the vocabulary's size or more): the full softmax
    softmax_bias_init: Literal["zero", "unigram"]
    precision: Literal["fp32", "bf16", "fp16"]  # fp32, or bfloat16 or float16 autocast (fp16: GPU only)
    # every how many steps (0: never; a checkpoint and an evaluation come at the end regardless)
    log_every: Positive
    eval_every: Count
    checkpoint_every: Count
    keep_checkpoints: Positive
    optimizer: Annotated[OptimizerFactory, AfterValidator(_torch_optimizers_only)]
    schedule: LearnRate

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        index = value[len("cuda:") :] if value.startswith("cuda:") else None
        if value not in ("cpu", "cuda", "auto") and not (index and index.isdigit()):
            raise ValueError(f"is {value!r}; expected 'cpu', 'cuda', 'cuda:N' or 'auto'")
        return value

    @model_validator(mode="after")
    def _has_an_end(self) -> "TrainingSection":
        if not (self.max_steps or self.max_epochs or self.max_minutes):
            raise ValueError("set at least one of training.max_steps, training.max_epochs, training.max_minutes")
        if not (self.max_steps or self.max_epochs):
            self.schedule(0, 1.0, None)  # a ValueError from a schedule that needs the last step
        return self

    def last_step(self, steps_per_epoch: int) -> Optional[int]:
        """Where the run ends, in steps: max_steps, or max_epochs of steps (None: only max_minutes ends it)."""
        return self.max_steps or self.max_epochs * steps_per_epoch or None

    def learn_rate(self, peak: float, steps_per_epoch: int) -> Callable[[int], float]:
        """The learning rate of every step: the schedule from the optimizer's rate `peak` to the last step."""
        last_step = self.last_step(steps_per_epoch)
        return lambda step: self.schedule(step, peak, last_step)

    def amp_dtype(self, device: torch.device) -> Optional[torch.dtype]:
        """What `precision` autocasts to on `device` (None: fp32); fp16 is refused on a CPU."""
        if self.precision == "fp16" and device.type != "cuda":
            raise PretrainConfigError(
                f"training.precision is 'fp16', which needs a GPU (training on {device}); use 'bf16' on the CPU"
            )
        return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[self.precision]


# The [model] settings: the biLM's options, less the vocabulary size, which the run's vocabulary sets.
MODEL_KEYS = tuple(name for name in OPTION_NAMES if name != "n_tokens_vocab")


class PretrainSettings(_Section):
    """The whole pretraining config, validated; `from_config` reads it."""

    paths: PathsSettings
    corpus: CorpusSection
    vocab: VocabSection
    model: dict[str, Any]  # read by BiLMOptions' own schema in `from_config`
    training: TrainingSection

    @classmethod
    def from_config(cls, config: Config, source: str = "the pretraining config") -> "PretrainSettings":
        """The settings of `config`; a PretrainConfigError lists every problem and names `source`."""
        problems: list[str] = []
        values = dict(Config(config).interpolate())
        training = values.get("training")
        if isinstance(training, dict):  # else reported by the schema
            made = {key: _make(training[key], key, problems) for key in REGISTERED if key in training}
            values["training"] = {**training, **made}
        problems.extend(_model_problems(values.get("model")))
        try:
            settings = cls.model_validate(values)
        except ValidationError as err:
            problems.extend(_problem(e) for e in err.errors() if e.get("input") is not _FAILED)
        if len(problems) == 1:
            raise PretrainConfigError(f"{source}: {problems[0]}")
        if problems:
            listed = "".join(f"\n  - {problem}" for problem in problems)
            raise PretrainConfigError(f"{source}: {len(problems)} problems in the pretraining config:{listed}")
        return settings


def _model_problems(section: Any) -> list[str]:
    """The problems of [model], read by the biLM options' own schema."""
    if not isinstance(section, dict):  # reported by the schema
        return []
    unknown = sorted(set(section) - set(MODEL_KEYS))
    if unknown:
        return [f"model: unknown settings {unknown}; expected some of {', '.join(MODEL_KEYS)}"]
    try:
        BiLMOptions(**section)
    except ValidationError as err:
        return [_problem(e, "model") for e in err.errors()]
    except (TypeError, ValueError) as err:
        return [f"model: {err}"]
    return []


REGISTERED = ("optimizer", "schedule")
"""The [training] blocks that a registered function makes."""
_FAILED = object()  # stands in for a registered block that could not be made (already reported)


def _make(block: Any, key: str, problems: list[str]) -> Any:
    """What the registered function of [training.`key`] makes; its problems are added to `problems`."""
    if not registry.is_promise(block):
        return block  # reported by the schema
    for at, name in block.items():
        if at.startswith("@") and not registry.has(at[1:], name):
            known = getattr(registry, at[1:]).get_all() if hasattr(registry, at[1:]) else {}
            ours = ", ".join(sorted(n for n in known if n.startswith("spacy-elmo."))) or f"none in {at}"
            problems.append(f"training.{key}.{at} is {name!r}: not a registered function (pretraining's: {ours})")
            return _FAILED
    try:
        return registry.resolve({key: block}, validate=True)[key]
    except ConfigValidationError as err:  # an argument unknown, missing or of the wrong type (confection)
        problems.extend(_problem({"loc": [key], **error}, "training") for error in err.errors or [])
    except ValidationError as err:  # an argument out of its range (the function's own pydantic check)
        problems.extend(_problem(error, f"training.{key}") for error in err.errors())
    except (TypeError, ValueError) as err:  # a registered function not checked so: an unknown or a bad argument
        problems.append(f"training.{key}: {err}")
    return _FAILED


def _problem(error: Any, prefix: str = "") -> str:
    """One pydantic or confection error as a line of the report: the dotted key first."""
    key = ".".join([*([prefix] if prefix else []), *(str(part) for part in error["loc"])])
    kind, message = error.get("type"), str(error["msg"]).removeprefix("at root: ")
    if kind == "missing":
        return f"{key} is missing"
    if kind == "extra_forbidden":
        return f"{key}: unknown setting"
    if kind == "value_error":
        detail = message.removeprefix("Value error, ")
        return f"{key} {detail}" if detail.startswith("is ") else f"{key}: {detail}"
    if not error["loc"] or "input" not in error:  # a check of several values of `prefix`, or confection's
        return f"{key}: {message}"
    return f"{key} is {error['input']!r}; {message[:1].lower()}{message[1:]}"
