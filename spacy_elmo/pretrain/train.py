"""The pretraining loop: biLM + shared softmax, sampled softmax, checkpoints, DDP, metrics.

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
import json
import math
import os
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy
import torch
from thinc.api import Config
from torch import nn

from ..bilm.bilm import BiLM
from ..bilm.native import bilm_from_bytes, bilm_to_bytes, save_native
from ..bilm.weights import bilm_arrays, build_bilm
from ..loading import load_bilm
from . import checkpoint as ckpt
from .batches import WindowBatcher
from .config import PretrainConfigError, model_options
from .schedule import schedule_from_config
from .corpus import CorpusSettings, TokenStream, build_vocab, prepare_corpus
from .perplexity import stream_perplexity
from .sampled_softmax import LogUniformSampler, directional_nll
from .vocab import Vocab

Log = Callable[[str], None]


class LanguageModelLoss(nn.Module):
    """The biLM and its softmax as one module, so that DDP sees a single forward and backward."""

    def __init__(self, bilm: BiLM) -> None:
        super().__init__()
        if bilm.softmax is None:
            raise ValueError("training needs a biLM with a softmax")
        self.bilm = bilm

    def forward(
        self,
        char_ids: torch.Tensor,
        next_ids: torch.Tensor,
        prev_ids: torch.Tensor,
        samples: Optional[torch.Tensor],
        log_expected: Optional[torch.Tensor],
        dropout: float,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.bilm(char_ids, dropout=dropout)
        softmax = self.bilm.softmax
        f, b, n = directional_nll(out.layers[-1], next_ids, prev_ids, softmax.weight, softmax.bias, samples, log_expected)
        loss = (f + b) / (2 * n)
        return loss, f.detach() / n, b.detach() / n


@dataclass
class TrainState:
    """Everything besides the weights that a resumed run needs to continue exactly."""

    step: int = 0
    epoch: int = 0
    index: int = 0
    tokens: int = 0
    wall_s: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TrainResult:
    output_dir: Path
    state: TrainState
    last_eval: Optional[Dict[str, float]] = None
    losses: List[float] = field(default_factory=list)


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


def _init_distributed(device: torch.device) -> Tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size()


def _process_group_exists() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _end_distributed() -> None:
    """Tear down the process group this run created: left to interpreter exit, gloo's threads can be
    destroyed while still joinable, and a rank then aborts (SIGABRT) after a successful run."""
    import torch.distributed as dist

    if _process_group_exists():
        dist.destroy_process_group()


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def _corpus_settings(config: Config, max_tokens: Optional[int]) -> CorpusSettings:
    c = config["corpus"]
    return CorpusSettings(format=c["format"], text_field=c["text_field"], lang=c["lang"], max_tokens=max_tokens)


def _make_optimizer(config: Config, params) -> torch.optim.Optimizer:
    o = config["training"]["optimizer"]
    name = o["name"].lower()
    if name == "adam":
        return torch.optim.Adam(params, lr=o["learn_rate"], eps=o["eps"])
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=o["learn_rate"], initial_accumulator_value=o["adagrad_initial_accumulator"])
    if name == "sgd":
        return torch.optim.SGD(params, lr=o["learn_rate"])
    raise PretrainConfigError(f"training.optimizer.name is {o['name']!r}; expected 'adam', 'adagrad' or 'sgd'")


def _softmax_arrays(vocab: Vocab, dim: int, seed: int, stream: TokenStream, bias_init: str) -> Dict[str, numpy.ndarray]:
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
) -> Tuple[BiLM, Vocab]:
    seed = config["training"]["seed"]
    bias_init = config["training"]["softmax_bias_init"]
    if init_from:
        source = load_bilm(init_from)
        if source.softmax is not None and source.vocab is not None:
            log(f"continuing from {init_from} with its own softmax and vocabulary ({len(source.vocab)} words)")
            return source, Vocab(source.vocab, source=f"{init_from} vocabulary")
        log(f"continuing from {init_from}: it has no softmax, so a new one over the corpus vocabulary ({len(vocab)} words)")
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


class MetricsLog:
    """metrics.jsonl, append-only; on resume, records after the resumed step are dropped."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def truncate_after(self, step: int) -> None:
        if not self.enabled or not self.path.exists():
            return
        kept = [
            line for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        self.path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")

    def write(self, record: Dict[str, Any]) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


def pretrain(
    config: Config,
    output_dir: Union[str, Path],
    resume: bool = False,
    init_from: Optional[str] = None,
    log: Log = print,
) -> TrainResult:
    """Train (or continue training) a biLM language model as the config says; see the module doc."""
    threads = torch.get_num_threads()
    owns_process_group = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not _process_group_exists()
    try:
        if config["training"]["n_threads"]:
            torch.set_num_threads(int(config["training"]["n_threads"]))
        return _pretrain(config, Path(output_dir), resume, init_from, log)
    finally:
        torch.set_num_threads(threads)
        if owns_process_group:
            _end_distributed()


def _pretrain(config: Config, output_dir: Path, resume: bool, init_from: Optional[str], log: Log) -> TrainResult:
    T = config["training"]
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = _device(T["device"], local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    schedule_from_config(config, steps_per_epoch=1)  # a bad schedule fails here, before any tokenizing
    rank, world = _init_distributed(device)
    is_main = rank == 0
    say: Log = log if is_main else (lambda message: None)
    init_from = init_from or config["paths"].get("init_from")

    # --- data (rank 0 tokenizes; the others then read its cache entry) ---
    C = config["corpus"]
    if not C["train"]:
        raise PretrainConfigError("corpus.train is not set (give --paths.train PATH or set it in the config)")
    cache_dir = Path(C["cache_dir"]) if C["cache_dir"] else output_dir / "corpus-cache"
    train_settings = _corpus_settings(config, C["max_train_tokens"])
    if is_main:
        t0 = time.perf_counter()
        stream = prepare_corpus(C["train"], train_settings, cache_dir)
        say(f"training corpus: {stream.n_words} words, {stream.n_sentences} sentences, {len(stream.types)} types "
            f"({time.perf_counter() - t0:.1f}s, cache {stream.directory})")
    _barrier(world)
    if not is_main:
        stream = prepare_corpus(C["train"], train_settings, cache_dir)
    dev = None
    if C["dev"] and is_main:
        dev = prepare_corpus(C["dev"], _corpus_settings(config, C["max_dev_tokens"]), cache_dir)
    V = config["vocab"]
    vocab = Vocab.from_file(V["file"]) if V["file"] else build_vocab(stream, V["max_size"], V["min_count"])

    # --- model, optimizer, state ---
    bilm, vocab = _build_model(config, vocab, stream, init_from, say)
    state = TrainState()
    checkpoint_dir = output_dir / "checkpoints"
    found = ckpt.latest_checkpoint(checkpoint_dir, warn=say) if resume else None
    if resume and found is None:
        say(f"no readable checkpoint in {checkpoint_dir}: starting from the beginning")
    if found is not None:
        bilm = bilm_from_bytes(found[1]["model"], source=str(found[0]))
        vocab = Vocab(bilm.vocab, source=f"{found[0]} vocabulary")
    bilm.to(device)
    bilm.train()
    model = LanguageModelLoss(bilm)
    train_module: nn.Module = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        train_module = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
        )
    optimizer = _make_optimizer(config, [p for p in bilm.parameters()])
    sampler_rng = torch.Generator().manual_seed(T["seed"] + 1)
    torch.manual_seed(T["seed"] + 2 + rank)
    if found is not None:
        payload = found[1]
        optimizer.load_state_dict(ckpt.decode_tree(payload["optimizer"]))
        state = TrainState(**payload["trainer"])
        ckpt.set_generator_state(sampler_rng, payload["rng"]["sampler"])
        torch.set_rng_state(torch.frombuffer(bytearray(payload["rng"]["torch"][rank]), dtype=torch.uint8))
        if device.type == "cuda" and payload["rng"].get("cuda"):
            torch.cuda.set_rng_state(torch.frombuffer(bytearray(payload["rng"]["cuda"][rank]), dtype=torch.uint8), device)
        say(f"resumed from {found[0]} (step {state.step}, epoch {state.epoch}, {state.tokens} tokens)")

    batcher = WindowBatcher(
        stream.tokens, stream.type_chars(), stream.type_to_vocab(vocab), T["window"], T["batch_size"], T["seed"], rank, world
    )
    learn_rate = schedule_from_config(config, batcher.steps_per_epoch)
    n_neg = int(T["n_negatives"])
    sampler = LogUniformSampler(len(vocab), n_neg) if 0 < n_neg < len(vocab) else None
    log_expected = sampler.log_expected.to(device) if sampler is not None else None
    use_amp = bool(T["mixed_precision"])
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda") if use_amp and device.type == "cuda" else None

    output_dir.mkdir(parents=True, exist_ok=True)
    metrics = MetricsLog(output_dir / "metrics.jsonl", is_main)
    if is_main:
        metrics.truncate_after(state.step)
        (output_dir / "config.cfg").write_text(config.to_str(), encoding="utf-8")
    n_params = sum(p.numel() for p in bilm.parameters())
    say(f"model: {n_params / 1e6:.2f}M parameters (softmax {len(vocab)} x {bilm.options.projection_dim}), "
        f"device {device}, {world} process(es), {batcher.steps_per_epoch} steps an epoch, "
        f"{'sampled softmax with ' + str(n_neg) + ' negatives' if sampler else 'full softmax'}")

    stop = {"signal": None}

    def request_stop(signum, frame):  # finish the step, checkpoint, then exit
        stop["signal"] = signum

    previous_handlers = {}
    for sig in (signal.SIGTERM, signal.SIGINT):  # every process: under torchrun, a stop reaches all
        try:
            previous_handlers[sig] = signal.signal(sig, request_stop)
        except ValueError:  # not the main thread
            pass

    def save_checkpoint() -> None:
        if world > 1:
            import torch.distributed as dist

            torch_states = [None] * world
            dist.all_gather_object(torch_states, torch.get_rng_state().numpy().tobytes())
            cuda_states = [None] * world
            if device.type == "cuda":
                dist.all_gather_object(cuda_states, torch.cuda.get_rng_state(device).numpy().tobytes())
        else:
            torch_states = [torch.get_rng_state().numpy().tobytes()]
            cuda_states = [torch.cuda.get_rng_state(device).numpy().tobytes()] if device.type == "cuda" else [None]
        if not is_main:
            return
        payload = {
            "model": bilm_to_bytes(bilm),
            "optimizer": ckpt.encode_tree(optimizer.state_dict()),
            "trainer": state.to_dict(),
            "rng": {"sampler": ckpt.generator_state(sampler_rng), "torch": torch_states,
                    "cuda": cuda_states if device.type == "cuda" else None},
            "config": config.to_str(),
        }
        path = ckpt.write_checkpoint(checkpoint_dir, state.step, payload)
        ckpt.prune_checkpoints(checkpoint_dir, T["keep_checkpoints"])
        say(f"checkpoint {path}")

    def evaluate() -> Optional[Dict[str, float]]:
        if dev is None or not is_main:
            return None
        result = stream_perplexity(bilm, dev, vocab, max_tokens=C["max_dev_tokens"])
        record = {"type": "eval", "step": state.step, "tokens": state.tokens, "wall_s": round(state.wall_s, 3),
                  **{f"dev_{k}": v for k, v in result.items()}}
        metrics.write(record)
        say(f"step {state.step:>7}  dev ppl {result['average_ppl']:.2f} (forward {result['forward_ppl']:.2f}, "
            f"backward {result['backward_ppl']:.2f})")
        return result

    max_steps, max_epochs, max_minutes = int(T["max_steps"] or 0), int(T["max_epochs"] or 0), float(T["max_minutes"] or 0)
    if not (max_steps or max_epochs or max_minutes):
        raise PretrainConfigError("set at least one of training.max_steps, training.max_epochs, training.max_minutes")
    result = TrainResult(output_dir=output_dir, state=state)
    if state.step == 0 and dev is not None:
        result.last_eval = evaluate()
    interval_loss, interval_steps, interval_tokens, interval_time = 0.0, 0, 0, 0.0
    session_start = time.perf_counter()
    wall_at_start = state.wall_s

    def done() -> bool:
        if max_steps and state.step >= max_steps:
            return True
        if max_epochs and state.epoch >= max_epochs:
            return True
        if max_minutes and state.wall_s >= max_minutes * 60:
            return True
        return stop["signal"] is not None

    def all_done() -> bool:
        """`done` agreed by every process (wall time and signals differ between them)."""
        local = done()
        if world == 1:
            return local
        import torch.distributed as dist

        flag = torch.tensor([1.0 if local else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def log_interval() -> None:
        nonlocal interval_loss, interval_steps, interval_tokens, interval_time
        if not interval_steps:
            return
        mean = interval_loss / interval_steps
        tps = interval_tokens / max(interval_time, 1e-9)
        metrics.write({"type": "train", "step": state.step, "epoch": state.epoch, "tokens": state.tokens,
                       "train_loss": mean, "train_ppl": math.exp(min(mean, 50.0)), "lr": learn_rate(max(state.step - 1, 0)),
                       "tokens_per_s": round(tps, 1), "wall_s": round(state.wall_s, 3)})
        say(f"step {state.step:>7}  epoch {state.epoch}  tokens {state.tokens:>10}  loss {mean:.4f}  "
            f"ppl {math.exp(min(mean, 50.0)):9.2f}  {tps:8.0f} tokens/s")
        interval_loss, interval_steps, interval_tokens, interval_time = 0.0, 0, 0, 0.0

    while not all_done():
        t0 = time.perf_counter()
        batch = batcher.batch(state.epoch, state.index).to(device)
        samples = sampler.sample(sampler_rng).to(device) if sampler is not None else None
        for group in optimizer.param_groups:
            group["lr"] = learn_rate(state.step)
        autocast = torch.autocast(device.type, dtype=amp_dtype) if use_amp else nullcontext()
        with autocast:
            loss, f_loss, b_loss = train_module(batch.char_ids, batch.next_ids, batch.prev_ids, samples, log_expected, T["dropout"])
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        if T["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(bilm.parameters(), T["grad_clip"])
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():  # "no token" row of the character embedding stays zero
            bilm.token_encoder.char_embedding[0].zero_()
        loss_value = float(loss.detach())
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"training loss became {loss_value} at step {state.step + 1}; lower the learning rate")
        state.step += 1
        state.index += 1
        if state.index >= batcher.steps_per_epoch:
            state.epoch, state.index = state.epoch + 1, 0
        state.tokens += batch.n_tokens * world
        step_time = time.perf_counter() - t0
        state.wall_s = wall_at_start + (time.perf_counter() - session_start)
        result.losses.append(loss_value)
        interval_loss += loss_value
        interval_steps += 1
        interval_tokens += batch.n_tokens * world
        interval_time += step_time
        if state.step % T["log_every"] == 0 or (max_steps and state.step >= max_steps):
            log_interval()
        if T["eval_every"] and state.step % T["eval_every"] == 0:
            result.last_eval = evaluate()
            session_start, wall_at_start = time.perf_counter(), state.wall_s  # evaluation time not counted
        if T["checkpoint_every"] and state.step % T["checkpoint_every"] == 0:
            save_checkpoint()
    log_interval()
    if stop["signal"] is not None:
        say(f"stopping at step {state.step} (signal {stop['signal']})")
    if not (T["checkpoint_every"] and state.step % T["checkpoint_every"] == 0):
        save_checkpoint()
    if dev is not None and not (T["eval_every"] and state.step % T["eval_every"] == 0):
        result.last_eval = evaluate()
    if is_main:
        save_native(bilm.cpu() if device.type != "cpu" else bilm, output_dir / "model")
        say(f"saved model to {output_dir / 'model'} (step {state.step}, {state.tokens} tokens)")
    for sig, handler in previous_handlers.items():
        signal.signal(sig, handler)
    _barrier(world)
    return result
