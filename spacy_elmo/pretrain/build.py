"""Pretraining a biLM language model: a run built from its config in steps, then trained (loop.py).

Under `torchrun` each process trains on its contiguous share of every global batch inside
DistributedDataParallel, all with the same negatives (identically seeded generators); rank 0 evaluates and
writes the outputs:
  model/          the trained biLM, native format (softmax and vocabulary included)
  checkpoints/    step_XXXXXXXX.ckpt (checkpoint.py); the newest that reads is resumed
  metrics.jsonl   one JSON object a line (metrics_log.py)
  config.cfg      the resolved config of the run
"""

import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Optional

import numpy
import torch
from thinc.api import Config

from ..bilm.bilm import BiLM
from ..bilm.lexicon import ByteLexicon
from ..bilm.options import BiLMOptions
from ..bilm.runner import parse_device, torch_threads
from ..disk import PathLike
from ..errors import named_settings, reading
from ..io.arrays import bilm_arrays, build_bilm
from ..io.native import bilm_from_bytes
from ..io.resolve import load_model
from ..launch_env import launch_env
from .batches import WindowBatcher
from .checkpoint import Checkpointer, CheckpointError, TrainState
from .config import PretrainConfigError, PretrainSettings
from .corpus import TokenStream, prepare_corpus
from .distributed import (
    Log,
    Placement,
    barrier,
    data_parallel,
    end_distributed,
    init_distributed,
    main_process_log,
    process_group_exists,
)
from .loop import LanguageModelLoss, Optimization, TrainingLoop, TrainResult
from .metrics_log import TrainingLog
from .perplexity import stream_perplexity
from .resume import ACCEPT_CHANGED_DATA, DataDigests, ResumePoint, check_resume_data, data_digests, find_resume_point
from .sampled_softmax import LogUniformSampler
from .vocab import Vocab


def pretrain(
    config: Config,
    output_dir: PathLike,
    resume: bool = False,
    init_from: Optional[str] = None,
    log: Log = print,
    source: str = "the pretraining config",
    accept_changed_data: bool = False,
) -> TrainResult:
    """Train (or continue training) a biLM language model as the config says. `source` names the config in
    errors; `accept_changed_data` resumes on data that differ from the checkpoint's (logged and recorded)."""
    settings = PretrainSettings.from_config(config, source)
    owns_process_group = launch_env().distributed and not process_group_exists()
    try:
        with torch_threads(settings.training.n_threads):
            return build_loop(config, settings, Path(output_dir), resume, init_from, log, accept_changed_data).run()
    finally:
        if owns_process_group:
            end_distributed()


def build_loop(
    config: Config,
    settings: PretrainSettings,
    output_dir: Path,
    resume: bool,
    init_from: Optional[str],
    log: Log,
    accept_changed_data: bool = False,
) -> TrainingLoop:
    """The run the config describes, ready to `run()`. Joins the process group under torchrun; only rank 0
    logs. On resume, the data is checked against the checkpoint before anything is written."""
    place = place_process(settings.training.device)
    amp_dtype = settings.training.amp_dtype(place.device)  # fp16 on a CPU refused here
    say = main_process_log(log, place.rank)
    found = find_resume_point(config, output_dir / "checkpoints", say) if resume else None
    digests = data_digests(settings)  # every process: each must refuse changed data on its own
    if found is not None:
        found.data_changes = check_resume_data(found, digests, accept_changed_data, say)
    train, dev = prepare_data(settings, output_dir, place, say, digests)
    bilm, vocab = restore_or_start_model(settings, train, found, init_from or settings.paths.init_from, say)
    loop = assemble_loop(config, settings, amp_dtype, bilm, vocab, train, dev, digests, place, found, output_dir, say)
    config_file = output_dir / "config.cfg"  # the config of a new run, or of a resumed one whose settings changed
    if place.is_main and (found is None or found.changes or not config_file.exists()):
        config_file.write_text(config.to_str(), encoding="utf-8")
        if found is not None and found.changes:
            say(f"{config_file} updated with the changed settings ({', '.join(found.changes)})")
    sampler = loop.optimization.sampler
    say(
        f"model: {sum(p.numel() for p in bilm.parameters()) / 1e6:.2f}M parameters (softmax {len(vocab)} x "
        f"{bilm.options.projection_dim}), device {place.device}, {place.world} process(es), "
        f"{loop.batcher.steps_per_epoch} steps an epoch, "
        f"{'sampled softmax with ' + str(sampler.n_samples) + ' negatives' if sampler else 'full softmax'}"
    )
    return loop


def place_process(device_name: str) -> Placement:
    """This process's device, checked as `--device` is (`runner.parse_device`: a GPU this machine has; under
    torchrun, "cuda" is the GPU of its LOCAL_RANK), and its place in the process group, joined under torchrun."""
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    if device_name.startswith("cuda") and not torch.cuda.is_available():
        raise PretrainConfigError(f"training.device is {device_name!r} but PyTorch sees no CUDA device")
    local = f"cuda:{launch_env().local_rank or 0}" if device_name == "cuda" else device_name
    with named_settings(device="training.device"):
        device = parse_device(local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    rank, world = init_distributed(device)
    return Placement(device, rank, world)


def prepare_data(
    settings: PretrainSettings, output_dir: Path, place: Placement, say: Log, digests: DataDigests
) -> tuple[TokenStream, Optional[TokenStream]]:
    """The training stream and the dev stream (rank 0 only; None without a dev corpus). Rank 0 tokenizes
    first; the others then read its cache entry instead of tokenizing the same text again."""
    C = settings.corpus
    cache_dir = Path(C.cache_dir) if C.cache_dir else output_dir / "corpus-cache"
    train_settings = C.settings(C.max_train_tokens)
    if place.is_main:
        t0 = time.perf_counter()
        stream = prepare_corpus(C.train, train_settings, cache_dir, digests["train"])
        say(
            f"training corpus: {stream.n_words} words, {stream.n_sentences} sentences, {len(stream.types)} types "
            f"({time.perf_counter() - t0:.1f}s, cache {stream.directory})"
        )
    barrier(place.world)
    if not place.is_main:
        stream = prepare_corpus(C.train, train_settings, cache_dir, digests["train"])
    dev = None
    if C.dev and place.is_main:
        dev = prepare_corpus(C.dev, C.settings(C.max_dev_tokens), cache_dir, digests["dev"])
    return stream, dev


def restore_or_start_model(
    settings: PretrainSettings, stream: TokenStream, found: Optional[ResumePoint], init_from: Optional[str], say: Log
) -> tuple[BiLM, Vocab]:
    """The model to train and its vocabulary: the checkpoint's when resuming, else a new one or the
    `init_from` weights (see `build_model`)."""
    if found is not None:
        with reading(str(found.path)):
            bilm = bilm_from_bytes(found.payload["model"])
        if bilm.vocab is None:
            raise CheckpointError(f"checkpoint {found.path} holds a model without its vocabulary")
        return bilm, Vocab(bilm.vocab, source=f"{found.path} vocabulary")
    V = settings.vocab
    vocab = (
        Vocab.from_file(V.file) if V.file else Vocab.from_counts(stream.types, stream.counts, V.max_size, V.min_count)
    )
    return build_model(settings, vocab, stream, init_from, say)


def build_model(
    settings: PretrainSettings, vocab: Vocab, stream: TokenStream, init_from: Optional[str], log: Log
) -> tuple[BiLM, Vocab]:
    """A new biLM over `vocab`, or the `init_from` weights: with their own softmax and vocabulary when they
    have them, else with a new softmax over `vocab`."""
    seed, bias_init = settings.training.seed, settings.training.softmax_bias_init
    if init_from:
        source = load_model(init_from).bilm
        if not isinstance(source.lexicon, ByteLexicon):  # the corpus is read as bilm-tf's byte ids
            raise ValueError(
                f"--init-from {init_from}: a model with its own character vocabulary (ELMoForManyLangs) cannot "
                "be pretrained further here; pretraining reads characters as bilm-tf's byte ids"
            )
        if source.softmax is not None and source.vocab is not None:
            log(f"continuing from {init_from} with its own softmax and vocabulary ({len(source.vocab)} words)")
            return source, Vocab(source.vocab, source=f"{init_from} vocabulary")
        log(
            f"continuing from {init_from}: it has no softmax, "
            f"so a new one over the corpus vocabulary ({len(vocab)} words)"
        )
    else:
        source = BiLM(BiLMOptions(**settings.model, n_tokens_vocab=len(vocab)))
        source.reset_parameters(seed)
    arrays = {name: value for name, value in bilm_arrays(source) if not name.startswith("softmax/")}
    # the new softmax: weights N(0, 1/P); bias zero or the log unigram frequency of each word
    dim = source.options.projection_dim
    weight = torch.randn(len(vocab), dim, generator=torch.Generator().manual_seed(seed + 17)) * dim**-0.5
    bias = numpy.zeros(len(vocab), dtype=numpy.float32)
    if bias_init == "unigram":
        ids = stream.type_to_vocab(vocab)
        counts = numpy.bincount(ids, weights=stream.counts, minlength=len(vocab)) + 1.0
        bias = numpy.log(counts / counts.sum()).astype(numpy.float32)
    arrays.update({"softmax/W": weight.numpy(), "softmax/b": bias})
    source.options.n_tokens_vocab = len(vocab)
    with reading(str(init_from or "new model")):
        return build_bilm(source.options, arrays, vocab=vocab.words), vocab


def assemble_loop(
    config: Config,
    settings: PretrainSettings,
    amp_dtype: Optional[torch.dtype],
    bilm: BiLM,
    vocab: Vocab,
    train: TokenStream,
    dev: Optional[TokenStream],
    digests: DataDigests,
    place: Placement,
    found: Optional[ResumePoint],
    output_dir: Path,
    say: Log,
) -> TrainingLoop:
    """The model on its device, the optimizer, the random generators, the batches, the checkpointer and the
    report, in the state of `found` (or at the start)."""
    T = settings.training
    bilm.to(place.device)
    bilm.train()
    module = data_parallel(LanguageModelLoss(bilm), place.device, place.world)
    optimizer = T.optimizer([p for p in bilm.parameters()])
    sampler_rng = torch.Generator().manual_seed(T.seed + 1)
    torch.manual_seed(T.seed + 2 + place.rank)  # dropout: each process its own
    batcher = WindowBatcher(
        train.tokens,
        train.type_chars(),
        train.type_to_vocab(vocab),
        T.window,
        T.batch_size,
        T.seed,
        place.rank,
        place.world,
    )
    sampler = LogUniformSampler(len(vocab), T.n_negatives) if 0 < T.n_negatives < len(vocab) else None
    optimization = Optimization(
        bilm=bilm,
        module=module,
        optimizer=optimizer,
        learn_rate=T.learn_rate(optimizer.defaults["lr"], batcher.steps_per_epoch),
        sampler=sampler,
        sampler_rng=sampler_rng,
        settings=T,
        amp_dtype=amp_dtype,
        device=place.device,
    )
    checkpointer = Checkpointer(
        output_dir / "checkpoints",
        bilm,
        optimizer,
        sampler_rng,
        place,
        T.keep_checkpoints,
        config.to_str(),
        say,
        digests,
    )
    state = checkpointer.restore(found.path, found.payload) if found is not None else TrainState()
    if state.index >= batcher.steps_per_epoch:  # (accepted) changed training data with fewer batches an epoch
        say(
            f"epoch {state.epoch} of the changed training data has only {batcher.steps_per_epoch} batches: "
            f"continuing with epoch {state.epoch + 1}"
        )
        state.epoch, state.index = state.epoch + 1, 0
    evaluate = None
    if dev is not None:
        evaluate = partial(stream_perplexity, bilm, dev, vocab, max_tokens=settings.corpus.max_dev_tokens)
    report = TrainingLog(output_dir / "metrics.jsonl", place.rank, say)
    output_dir.mkdir(parents=True, exist_ok=True)
    report.truncate_after(state.step)
    for change in found.data_changes if found is not None else []:
        report.write(
            {"type": "data_changed", "step": state.step, **asdict(change), "accepted_with": ACCEPT_CHANGED_DATA}
        )
    return TrainingLoop(optimization, batcher, T, place, checkpointer, evaluate, report, output_dir, state)
