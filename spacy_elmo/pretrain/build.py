"""Pretraining a biLM language model: a run assembled from its config, then trained (trainer.py).

Output directory:
  model/          the trained biLM, native format (softmax and vocabulary included)
  checkpoints/    step_XXXXXXXX.ckpt (see checkpoint.py); the newest that reads is resumed
  metrics.jsonl   one JSON object a line: {"type": "train" | "eval", "step", "tokens", ...}
  config.cfg      the resolved config of the run

Distribution: started by `torchrun`, each process trains on its contiguous share of every global
batch inside PyTorch's DistributedDataParallel (NCCL on GPUs, gloo on CPUs); negatives are drawn
from identically seeded generators, so every process uses the same ones. Rank 0 evaluates, writes
checkpoints, metrics and the model.
"""

import time
from pathlib import Path
from typing import Optional, Union

import numpy
import torch
from thinc.api import Config

from ..bilm.bilm import BiLM
from ..io.native import bilm_from_bytes
from ..io.arrays import bilm_arrays, build_bilm
from ..io.resolve import load_bilm
from . import checkpoint as ckpt
from .batches import WindowBatcher
from .config import PretrainConfigError, model_options, resume_changes
from .corpus import CorpusSettings, TokenStream, build_vocab, prepare_corpus
from .distributed import (
    barrier,
    data_parallel,
    end_distributed,
    init_distributed,
    local_rank_from_env,
    process_group_exists,
    world_size_from_env,
)
from .metrics import MetricsLog
from .sampled_softmax import LogUniformSampler
from .schedule import schedule_from_config
from .trainer import LanguageModelLoss, Log, Trainer, TrainerSettings, TrainResult, main_process_log
from .vocab import Vocab


def pretrain(
    config: Config,
    output_dir: Union[str, Path],
    resume: bool = False,
    init_from: Optional[str] = None,
    log: Log = print,
) -> TrainResult:
    """Train (or continue training) a biLM language model as the config says; see the module doc."""
    threads = torch.get_num_threads()
    owns_process_group = world_size_from_env() > 1 and not process_group_exists()
    try:
        if config["training"]["n_threads"]:
            torch.set_num_threads(int(config["training"]["n_threads"]))
        return build_trainer(config, Path(output_dir), resume, init_from, log).run()
    finally:
        torch.set_num_threads(threads)
        if owns_process_group:
            end_distributed()


def build_trainer(config: Config, output_dir: Path, resume: bool, init_from: Optional[str], log: Log) -> Trainer:
    """The run the config describes, ready to `run()`: data, model, optimizer, and on `resume` the newest
    readable checkpoint's state. Joins the process group under torchrun; only rank 0 logs."""
    T = config["training"]
    device = _device(T["device"], local_rank_from_env())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    schedule_from_config(config, steps_per_epoch=1)  # a bad schedule fails here, before any tokenizing
    rank, world = init_distributed(device)
    is_main = rank == 0
    say = main_process_log(log, rank)
    init_from = init_from or config["paths"].get("init_from")
    checkpoint_dir = output_dir / "checkpoints"
    found = ckpt.latest_checkpoint(checkpoint_dir, warn=say) if resume else None
    if resume and found is None:
        say(f"no readable checkpoint in {checkpoint_dir}: starting from the beginning")
    changes = resume_changes(found[1]["config"], config, str(found[0])) if found is not None else {}
    for key, (old, new) in changes.items():
        say(f"resuming with {key} changed: {old!r} -> {new!r}")
    stream, dev = _prepare_data(config, output_dir, is_main, world, say)
    V = config["vocab"]
    vocab = Vocab.from_file(V["file"]) if V["file"] else build_vocab(stream, V["max_size"], V["min_count"])

    # --- model, optimizer, random generators ---
    bilm, vocab = _build_model(config, vocab, stream, init_from, say)
    if found is not None:
        bilm = bilm_from_bytes(found[1]["model"], source=str(found[0]))
        if bilm.vocab is None:
            raise ckpt.CheckpointError(f"checkpoint {found[0]} holds a model without its vocabulary")
        vocab = Vocab(bilm.vocab, source=f"{found[0]} vocabulary")
    bilm.to(device)
    bilm.train()
    train_module = data_parallel(LanguageModelLoss(bilm), device, world)
    optimizer = _make_optimizer(config, [p for p in bilm.parameters()])
    sampler_rng = torch.Generator().manual_seed(T["seed"] + 1)
    torch.manual_seed(T["seed"] + 2 + rank)

    batcher = WindowBatcher(
        stream.tokens,
        stream.type_chars(),
        stream.type_to_vocab(vocab),
        T["window"],
        T["batch_size"],
        T["seed"],
        rank,
        world,
    )
    n_neg = int(T["n_negatives"])
    sampler = LogUniformSampler(len(vocab), n_neg) if 0 < n_neg < len(vocab) else None
    scaler = torch.amp.GradScaler("cuda") if T["mixed_precision"] and device.type == "cuda" else None
    metrics = MetricsLog(output_dir / "metrics.jsonl", is_main)
    trainer = Trainer(
        bilm=bilm,
        train_module=train_module,
        optimizer=optimizer,
        scaler=scaler,
        batcher=batcher,
        learn_rate=schedule_from_config(config, batcher.steps_per_epoch),
        sampler=sampler,
        sampler_rng=sampler_rng,
        vocab=vocab,
        dev=dev,
        settings=TrainerSettings.from_config(config, device),
        device=device,
        rank=rank,
        world=world,
        output_dir=output_dir,
        metrics=metrics,
        config_text=config.to_str(),
        log=log,
    )
    if found is not None:
        trainer.restore(*found)

    # --- outputs ---
    output_dir.mkdir(parents=True, exist_ok=True)
    if is_main:
        metrics.truncate_after(trainer.state.step)
        config_file = output_dir / "config.cfg"
        if found is None or changes or not config_file.exists():
            (output_dir / "config.cfg").write_text(config.to_str(), encoding="utf-8")
            if changes:
                say(f"{config_file} updated with the changed settings ({', '.join(changes)})")
    n_params = sum(p.numel() for p in bilm.parameters())
    say(
        f"model: {n_params / 1e6:.2f}M parameters (softmax {len(vocab)} x {bilm.options.projection_dim}), "
        f"device {device}, {world} process(es), {batcher.steps_per_epoch} steps an epoch, "
        f"{'sampled softmax with ' + str(n_neg) + ' negatives' if sampler else 'full softmax'}"
    )
    return trainer


def _prepare_data(
    config: Config, output_dir: Path, is_main: bool, world: int, say: Log
) -> tuple[TokenStream, Optional[TokenStream]]:
    """The training stream and the dev stream (rank 0 only; None without a dev corpus). Rank 0 tokenizes
    first; the others then read its cache entry instead of tokenizing the same text again."""
    C = config["corpus"]
    if not C["train"]:
        raise PretrainConfigError("corpus.train is not set (give --paths.train PATH or set it in the config)")
    cache_dir = Path(C["cache_dir"]) if C["cache_dir"] else output_dir / "corpus-cache"
    train_settings = _corpus_settings(config, C["max_train_tokens"])
    if is_main:
        t0 = time.perf_counter()
        stream = prepare_corpus(C["train"], train_settings, cache_dir)
        say(
            f"training corpus: {stream.n_words} words, {stream.n_sentences} sentences, {len(stream.types)} types "
            f"({time.perf_counter() - t0:.1f}s, cache {stream.directory})"
        )
    barrier(world)
    if not is_main:
        stream = prepare_corpus(C["train"], train_settings, cache_dir)
    dev = None
    if C["dev"] and is_main:
        dev = prepare_corpus(C["dev"], _corpus_settings(config, C["max_dev_tokens"]), cache_dir)
    return stream, dev


def _device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise PretrainConfigError(f"training.device is {name!r} but PyTorch sees no CUDA device")
        return torch.device("cuda", local_rank) if name == "cuda" else torch.device(name)
    if name != "cpu":
        raise PretrainConfigError(f"training.device is {name!r}; expected 'cpu', 'cuda', 'cuda:N' or 'auto'")
    return torch.device("cpu")


def _corpus_settings(config: Config, max_tokens: Optional[int]) -> CorpusSettings:
    c = config["corpus"]
    return CorpusSettings(format=c["format"], text_field=c["text_field"], lang=c["lang"], max_tokens=max_tokens)


def _make_optimizer(config: Config, params) -> torch.optim.Optimizer:
    o = config["training"]["optimizer"]
    name = o["name"].lower()
    if name == "adam":
        return torch.optim.Adam(params, lr=o["learn_rate"], eps=o["eps"])
    if name == "adagrad":
        return torch.optim.Adagrad(
            params, lr=o["learn_rate"], initial_accumulator_value=o["adagrad_initial_accumulator"]
        )
    if name == "sgd":
        return torch.optim.SGD(params, lr=o["learn_rate"])
    raise PretrainConfigError(f"training.optimizer.name is {o['name']!r}; expected 'adam', 'adagrad' or 'sgd'")


def _softmax_arrays(vocab: Vocab, dim: int, seed: int, stream: TokenStream, bias_init: str) -> dict[str, numpy.ndarray]:
    """A new softmax: weights N(0, 1/P); bias zero or the log unigram frequency of each word."""
    generator = torch.Generator().manual_seed(seed + 17)
    weight = torch.randn(len(vocab), dim, generator=generator) * dim**-0.5
    bias = numpy.zeros(len(vocab), dtype=numpy.float32)
    if bias_init == "unigram":
        ids = stream.type_to_vocab(vocab)
        counts = numpy.bincount(ids, weights=stream.counts, minlength=len(vocab)) + 1.0
        bias = numpy.log(counts / counts.sum()).astype(numpy.float32)
    elif bias_init != "zero":
        raise PretrainConfigError(f"training.softmax_bias_init is {bias_init!r}; expected 'zero' or 'unigram'")
    return {"softmax/W": weight.numpy(), "softmax/b": bias}


def _build_model(
    config: Config, vocab: Vocab, stream: TokenStream, init_from: Optional[str], log: Log
) -> tuple[BiLM, Vocab]:
    seed = config["training"]["seed"]
    bias_init = config["training"]["softmax_bias_init"]
    if init_from:
        source = load_bilm(init_from)
        if source.softmax is not None and source.vocab is not None:
            log(f"continuing from {init_from} with its own softmax and vocabulary ({len(source.vocab)} words)")
            return source, Vocab(source.vocab, source=f"{init_from} vocabulary")
        log(
            f"continuing from {init_from}: it has no softmax, "
            f"so a new one over the corpus vocabulary ({len(vocab)} words)"
        )
        arrays = {name: value for name, value in bilm_arrays(source) if not name.startswith("softmax/")}
        arrays.update(_softmax_arrays(vocab, source.options.projection_dim, seed, stream, bias_init))
        options = source.options
        options.n_tokens_vocab = len(vocab)
        return build_bilm(options, arrays, source=str(init_from), vocab=vocab.words), vocab
    bilm = BiLM(model_options(config, len(vocab)))
    bilm.reset_parameters(seed)
    arrays = dict(bilm_arrays(bilm))
    arrays.update(_softmax_arrays(vocab, bilm.options.projection_dim, seed, stream, bias_init))
    return build_bilm(bilm.options, arrays, source="new model", vocab=vocab.words), vocab
