"""Sentences in, per-sentence layer arrays out: boundaries, length-sorted batches, optional state.

This is the numpy-facing entry point shared by the spaCy pipe, the `embed` command and the tests.
Stateless (the default): every sentence starts from a zero state, so its vectors do not depend on
which batch it lands in, and batches are built by sorting sentences by length under a token budget.
Stateful: the reference behaviour of bilm-tf/AllenNLP, for parity; batch row i starts from the state
row i ended with in the previous call, and sentences are embedded in the order and grouping given.
"""
import contextlib
from typing import Iterable, List, Optional, Sequence

import numpy
import torch

from .. import chars
from .bilm import BiLM
from .carried_state import CarriedState

DEFAULT_TOKEN_BUDGET = 4096
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def is_out_of_memory(error: BaseException) -> bool:
    oom_type = getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(error, oom_type) or (isinstance(error, RuntimeError) and "out of memory" in str(error))


def length_sorted_batches(lengths: Sequence[int], token_budget: int, max_batch_size: int = 1024) -> List[List[int]]:
    """Group indices into batches of similar length, each with padded size <= token_budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: List[List[int]] = []
    current: List[int] = []
    for index in order:
        width = max(lengths[current[0]], 1) if current else max(lengths[index], 1)
        if current and ((len(current) + 1) * width > token_budget or len(current) >= max_batch_size):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


class BiLMEmbedder:
    """Runs a BiLM over tokenized sentences and returns (L+1, n_tokens, 2P) float32 arrays."""

    def __init__(
        self,
        bilm: BiLM,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        stateful: bool = False,
        max_batch_size: int = 1024,
        token_cache_size: Optional[int] = None,
        precision: str = "fp32",
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        self.bilm = bilm
        self.precision = precision
        self.n_splits = 0  # batches split after running out of memory
        if token_cache_size is not None:
            bilm.set_token_cache(token_cache_size)
        self.token_budget = token_budget
        self.stateful = stateful
        self.max_batch_size = max_batch_size
        self._carried = CarriedState()

    def reset_state(self) -> None:
        self._carried.reset()

    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> List[numpy.ndarray]:
        """One forward pass over these sentences (stateful mode carries state by row).

        Stateless batches that run out of device memory are split in halves and retried, and the
        token budget is lowered for the batches that follow: no sentence is ever dropped.
        """
        if self.stateful:
            return self._forward(sentences)
        try:
            return self._forward(sentences)
        except (RuntimeError, MemoryError) as error:
            if not is_out_of_memory(error):
                raise
            if len(sentences) == 1:
                raise MemoryError(
                    f"a single sentence of {len(sentences[0])} tokens does not fit in memory on "
                    f"{self.bilm.device}; split long texts into sentences or windows first"
                ) from error
        self.n_splits += 1
        if self.bilm.device.type == "cuda":
            torch.cuda.empty_cache()
        n_tokens = sum(len(s) + 2 for s in sentences)
        self.token_budget = max(1, min(self.token_budget, n_tokens // 2))
        half = len(sentences) // 2
        return self.embed_batch(sentences[:half]) + self.embed_batch(sentences[half:])

    @torch.no_grad()
    def _forward(self, sentences: Sequence[Sequence[str]]) -> List[numpy.ndarray]:
        bilm = self.bilm
        was_training = bilm.training
        bilm.eval()
        try:
            ids = chars.batch_to_ids(sentences, max_characters_per_token=bilm.options.max_characters_per_token)
            char_ids = torch.from_numpy(ids).to(bilm.device)
            initial, track = None, False
            if self.stateful:
                track = True
                initial = self._carried.rows(bilm.lstm, len(sentences), char_ids.device)
            dtype = PRECISIONS[self.precision]
            autocast = (
                torch.autocast(device_type=char_ids.device.type, dtype=dtype)
                if dtype is not None
                else contextlib.nullcontext()
            )
            with autocast:
                output = bilm(char_ids, initial_state=initial, return_final_state=track)
            if self.stateful:
                self._carried.store(output.final_state)
            # one copy back to the host for the whole batch
            layers = output.layers.float().cpu().numpy()
        finally:
            bilm.train(was_training)
        # strip <S> and </S>
        return [numpy.ascontiguousarray(layers[:, row, 1 : len(sent) + 1]) for row, sent in enumerate(sentences)]

    def embed_sentences(self, sentences: Sequence[Sequence[str]]) -> List[numpy.ndarray]:
        """Embed any number of sentences; stateless mode groups them into length-sorted batches."""
        if self.stateful:
            raise ValueError("stateful embedding keeps the caller's batches: call embed_batch per batch")
        results: List[Optional[numpy.ndarray]] = [None] * len(sentences)
        lengths = [len(s) + 2 for s in sentences]
        for batch in length_sorted_batches(lengths, self.token_budget, self.max_batch_size):
            for index, array in zip(batch, self.embed_batch([sentences[i] for i in batch])):
                results[index] = array
        return results  # type: ignore[return-value]

    def embed_tokens(self, tokens: Iterable[str], batch_size: int = 4096) -> numpy.ndarray:
        """Context-independent token vectors (n, P): what `elmo_token_embeddings.hdf5` holds."""
        tokens = list(tokens)
        out = []
        with torch.no_grad():
            for start in range(0, len(tokens), batch_size):
                ids = chars.tokens_to_ids(tokens[start : start + batch_size], self.bilm.options.max_characters_per_token)
                vectors = self.bilm.token_encoder(torch.from_numpy(ids).to(self.bilm.device))
                out.append(vectors.float().cpu().numpy())
        P = self.bilm.options.projection_dim
        return numpy.concatenate(out) if out else numpy.zeros((0, P), dtype=numpy.float32)
