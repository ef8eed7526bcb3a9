"""The pretraining config: spaCy/thinc config format, defaults filled in, overrides applied.

A user config only needs what differs from `DEFAULT_CONFIG`; `--section.key value` overrides on the
command line (as `spacy train` takes them) are applied after the defaults are merged, so any key can
be overridden whether or not the file names it.
"""

from pathlib import Path
from typing import Any, Optional, Union

from thinc.api import Config

from ..bilm.options import BiLMOptions

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
name = "adam"
learn_rate = 0.001
warmup_steps = 0
# after the warm-up: "none" (constant), "linear" or "cosine" down to final_learn_rate_ratio x learn_rate
# at training.max_steps (or max_epochs)
decay = "none"
final_learn_rate_ratio = 0.0
eps = 1e-8
adagrad_initial_accumulator = 1.0
"""

MODEL_KEYS = (
    "filters",
    "char_embedding_dim",
    "n_highway",
    "activation",
    "lstm_dim",
    "projection_dim",
    "n_layers",
    "cell_clip",
    "proj_clip",
    "use_skip_connections",
)


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


def model_options(config: Config, n_vocab: int) -> BiLMOptions:
    section = config["model"]
    unknown = set(section) - set(MODEL_KEYS)
    if unknown:
        raise PretrainConfigError(f"[model]: unknown settings {sorted(unknown)}; expected {MODEL_KEYS}")
    kwargs = {k: section[k] for k in MODEL_KEYS}
    return BiLMOptions(**kwargs, n_tokens_vocab=n_vocab)


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
