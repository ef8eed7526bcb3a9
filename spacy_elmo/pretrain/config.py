"""The pretraining config: spaCy/thinc config format, defaults filled in, overrides applied, validated once.

A user config only needs what differs from `DEFAULT_CONFIG`; `--section.key value` overrides on the
command line (as `spacy train` takes them) are applied after the defaults are merged, so any key can
be overridden whether or not the file names it. `PretrainSettings.from_config` reads the whole config
against one strict schema: the optimizer and the learning-rate schedule are registered functions
(`@optimizers`, `@schedules`, see optimizers.py and schedule.py), everything else plain settings, and
every problem is reported at once, each with its key, naming the config file.
"""

from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Union

import torch
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from thinc.api import Config, registry

from ..bilm.options import OPTION_NAMES, BiLMOptions
from .corpus import FORMATS, CorpusSettings
from .optimizers import TorchOptimizer
from .schedule import ScheduleSettings

DEFAULT_CONFIG = """
[paths]
train = null
dev = null
vocab = null
init_from = null

[corpus]
train = ${paths.train}
dev = ${paths.dev}
format = "text"
text_field = "text"
lang = "en"
max_train_tokens = null
max_dev_tokens = 20000
cache_dir = null

[vocab]
file = ${paths.vocab}
max_size = 30000
min_count = 1

[model]
filters = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256]]
char_embedding_dim = 16
n_highway = 1
activation = "relu"
lstm_dim = 512
projection_dim = 128
n_layers = 2
cell_clip = 3.0
proj_clip = 3.0
use_skip_connections = true

[training]
seed = 0
device = "cpu"
n_threads = 0
window = 20
batch_size = 64
max_steps = 1000
max_epochs = 0
max_minutes = 0
dropout = 0.1
grad_clip = 10.0
n_negatives = 1024
softmax_bias_init = "zero"
mixed_precision = false
log_every = 10
eval_every = 200
checkpoint_every = 200
keep_checkpoints = 2

[training.optimizer]
# a registered optimizer: spacy-elmo.Adam.v1 (takes eps), spacy-elmo.Adagrad.v1 (initial_accumulator_value)
# or spacy-elmo.SGD.v1; learn_rate is the peak rate of the schedule
@optimizers = "spacy-elmo.Adam.v1"
learn_rate = 0.001

[training.schedule]
# linear warm-up, then a constant rate ("none") or a "linear" or "cosine" decay down to
# final_learn_rate_ratio x learn_rate at training.max_steps (or max_epochs)
@schedules = "spacy-elmo.warmup_decay.v1"
warmup_steps = 0
decay = "none"
final_learn_rate_ratio = 0.0
"""


class PretrainConfigError(ValueError):
    """A pretraining config value that cannot be used."""


def load_config(
    path: Optional[Union[str, Path]] = None, overrides: Optional[dict[str, Any]] = None, text: Optional[str] = None
) -> Config:
    """The config at `path` (or in `text`) over the defaults, with `overrides` ({"training.max_steps": 100})."""
    defaults = Config().from_str(DEFAULT_CONFIG, interpolate=False)
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"pretraining config not found: {path}")
        user = Config().from_disk(path, interpolate=False)
    else:
        user = Config().from_str(text or "", interpolate=False)
    merged = defaults.merge(user)
    for key in overrides or {}:
        section, _, leaf = key.rpartition(".")
        node: Any = merged
        for part in section.split(".") if section else []:
            if not isinstance(node, dict) or part not in node:
                raise PretrainConfigError(f"override --{key}: no section [{section}] in the pretraining config")
            node = node[part]
        if leaf not in node:
            raise PretrainConfigError(f"override --{key}: unknown setting '{leaf}' in [{section}]")
    return Config().from_str(merged.to_str(), overrides=overrides or {}, interpolate=True)


# --- the schema --------------------------------------------------------------------------------------


def _null_is_zero(value: Any) -> Any:
    return 0 if value is None else value


Count = Annotated[int, BeforeValidator(_null_is_zero), Field(ge=0)]
"""A count or an interval in steps, where 0 (or null) means none."""
Minutes = Annotated[float, BeforeValidator(_null_is_zero), Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
Files = Union[str, list[str]]


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

    train: Optional[Files]
    dev: Optional[Files]
    format: str
    text_field: str
    lang: str
    max_train_tokens: Optional[Positive]
    max_dev_tokens: Optional[Positive]
    cache_dir: Optional[str]

    @field_validator("train")
    @classmethod
    def _train_is_set(cls, value: Optional[Files]) -> Files:
        if not value:
            raise ValueError("is not set (give --paths.train PATH or set it in the config)")
        return value

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in FORMATS:
            raise ValueError(f"is {value!r}; expected one of {', '.join(FORMATS)}")
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
    n_threads: Count  # 0: torch's default
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
    mixed_precision: bool
    # every how many steps (0: never; a checkpoint and an evaluation come at the end regardless)
    log_every: Positive
    eval_every: Count
    checkpoint_every: Count
    keep_checkpoints: Positive
    optimizer: TorchOptimizer
    schedule: ScheduleSettings

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
        if self.schedule.needs_last_step and not (self.max_steps or self.max_epochs):
            raise ValueError(
                "training.schedule needs the step it ends at, but neither training.max_steps nor "
                "training.max_epochs is set (max_minutes alone does not give one)"
            )
        return self

    def learn_rate(self, steps_per_epoch: int) -> Callable[[int], float]:
        """The learning rate of every step: the schedule from `optimizer.learn_rate`, ending at max_steps (or
        max_epochs)."""
        last_step = self.max_steps or self.max_epochs * steps_per_epoch
        return self.schedule.schedule(self.optimizer.learn_rate, last_step)

    def amp_dtype(self, device: torch.device) -> Optional[torch.dtype]:
        """What `mixed_precision` autocasts to: float16 on CUDA, bfloat16 on the CPU; None without it."""
        if not self.mixed_precision:
            return None
        return torch.float16 if device.type == "cuda" else torch.bfloat16


# The [model] settings: the biLM's options (bilm/options.py), less the vocabulary size, which the run's
# vocabulary sets.
MODEL_KEYS = tuple(name for name in OPTION_NAMES if name != "n_tokens_vocab")


class PretrainSettings(_Section):
    """The whole pretraining config, validated; `from_config` reads it."""

    paths: PathsSettings
    corpus: CorpusSection
    vocab: VocabSection
    model: dict[str, Any]  # read by BiLMOptions' own schema in `from_config`
    training: TrainingSection

    def model_options(self, n_vocab: int) -> BiLMOptions:
        return BiLMOptions(**self.model, n_tokens_vocab=n_vocab)

    @classmethod
    def from_config(cls, config: Config, source: str = "the pretraining config") -> "PretrainSettings":
        """The settings of `config` (as `load_config` returns it); a PretrainConfigError lists every problem,
        each with its key, and names `source` (the config file)."""
        problems: list[str] = []
        values = _resolve_registered(dict(Config(config).interpolate()), "", problems)
        problems.extend(_model_problems(values.get("model")))
        try:
            settings = cls.model_validate(values)
        except ValidationError as err:
            problems.extend(_problem(e) for e in err.errors() if e.get("input") is not _FAILED)
        if problems:
            if len(problems) == 1:
                raise PretrainConfigError(f"{source}: {problems[0]}")
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
        return [_problem(e, prefix="model") for e in err.errors()]
    except (TypeError, ValueError) as err:
        return [f"model: {err}"]
    return []


_FAILED = object()  # stands in for a registered block that could not be made (already reported)


def _resolve_registered(section: dict[str, Any], path: str, problems: list[str]) -> dict[str, Any]:
    """`section` with every registered block ({"@optimizers": name, ...}) replaced by what its registered
    function makes of the block's other keys; the problems of a block are added to `problems`, with its keys."""
    out: dict[str, Any] = {}
    for key, value in section.items():
        where = f"{path}{key}"
        if isinstance(value, dict) and registry.is_promise(value):
            out[key] = _make_registered(value, where, problems)
        elif isinstance(value, dict):
            out[key] = _resolve_registered(value, f"{where}.", problems)
        else:
            out[key] = value
    return out


def _make_registered(block: dict[str, Any], where: str, problems: list[str]) -> Any:
    names = [key for key in block if key.startswith("@")]
    if len(names) != 1:
        problems.append(f"{where}: one registered function a block, got {names}")
        return _FAILED
    registry_name, name = names[0][1:], block[names[0]]
    if not hasattr(registry, registry_name):
        problems.append(f"{where}.{names[0]}: no such registry (pretraining uses @optimizers and @schedules)")
        return _FAILED
    if not registry.has(registry_name, name):
        ours = sorted(n for n in getattr(registry, registry_name).get_all() if n.startswith("spacy-elmo."))
        problems.append(f"{where}.{names[0]} is {name!r}: not a registered function (pretraining's: {', '.join(ours)})")
        return _FAILED
    settings = {key: value for key, value in block.items() if key != names[0]}
    try:
        return registry.get(registry_name, name)(**settings)
    except ValidationError as err:  # a registered settings class: every field's problem, with its key
        problems.extend(_problem(e, prefix=where) for e in err.errors())
    except (TypeError, ValueError) as err:  # a registered function: an unknown or a bad argument
        problems.append(f"{where} ({name}): {err}")
    return _FAILED


def _problem(error: Any, prefix: str = "") -> str:
    """One pydantic error as a line of the report: the dotted key first."""
    key = ".".join([*([prefix] if prefix else []), *(str(part) for part in error["loc"])])
    kind, message = error["type"], str(error["msg"])
    if kind == "missing":
        return f"{key} is missing"
    if kind == "extra_forbidden":
        return f"{key}: unknown setting"
    if kind == "value_error":
        detail = message.removeprefix("Value error, ")
        return f"{key} {detail}" if detail.startswith("is ") else f"{key}: {detail}"
    if not error["loc"]:  # a check of several values of `prefix`
        return f"{key}: {message}"
    return f"{key} is {error['input']!r}; {message[:1].lower()}{message[1:]}"


# Settings that may differ between a run and its resumption: when to stop, how often to log, evaluate and
# checkpoint, what to evaluate on, where the corpus cache lives, and how many threads or which device run
# it (the last two change speed, or the last bits of the numbers, not what is trained). Anything else
# (model, data, vocabulary, batches, optimizer, schedule, seed) would continue a run that was not trained
# that way.
RESUMABLE_CHANGES = (
    "training.max_steps",
    "training.max_epochs",
    "training.max_minutes",
    "training.log_every",
    "training.eval_every",
    "training.checkpoint_every",
    "training.keep_checkpoints",
    "training.n_threads",
    "training.device",
    "paths.dev",
    "corpus.dev",
    "corpus.max_dev_tokens",
    "corpus.cache_dir",
    "paths.init_from",  # a checkpoint's weights win over init_from on resume
)


def _flatten(section: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(section, dict):
        return {prefix[:-1]: section}
    out: dict[str, Any] = {}
    for key, value in section.items():
        out.update(_flatten(value, f"{prefix}{key}."))
    return out


def resume_changes(saved: str, current: Config, source: str) -> dict[str, tuple[Any, Any]]:
    """The settings that differ between a checkpoint's config (`saved`, as text) and this run's, as
    {key: (saved, now)}. A change to anything but `RESUMABLE_CHANGES` is a PretrainConfigError naming
    every such key: the checkpoint was not trained that way."""
    before = _flatten(Config().from_str(saved, interpolate=True))
    after = _flatten(Config(current).interpolate())
    changed = {
        key: (before.get(key), after.get(key))
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    }
    refused = {key: values for key, values in changed.items() if key not in RESUMABLE_CHANGES}
    if refused:
        listed = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in refused.items())
        raise PretrainConfigError(
            f"cannot resume from {source}: the run was trained with other settings ({listed}). Resume with "
            f"the checkpoint's settings (its config is saved in the checkpoint and in config.cfg), or start a "
            f"new run in another output directory. Safe to change on resume: {', '.join(RESUMABLE_CHANGES)}"
        )
    return changed
