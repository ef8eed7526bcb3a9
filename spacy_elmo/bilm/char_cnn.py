"""The context-independent token layer: character embedding -> CNN -> highway -> projection.

Parameters keep the bilm-tf checkpoint's orientation ((in, out)), so import and export are plain copies.
ELMoForManyLangs-style models add a word embedding (the last id column) before the projection.
"""

from typing import Optional

import torch
from torch import nn

from .. import chars
from .options import BiLMOptions
from .precision import FP32, HALF_DTYPES, Products

ROW_CHUNK = 64
ROW_QUANTUM = 8
# A GPU's chunk: few launches for a whole batch, and a bounded product (rows x positions x filters of one width).
GPU_ROW_CHUNK = 4096


def chunk_rows(n_rows: int, chunk: int = ROW_CHUNK) -> list[int]:
    """Row counts of the chunks `n_rows` tokens are encoded in: `chunk` rows each, the last one
    rounded up to a multiple of ROW_QUANTUM (zero rows, cut off again).

    A row's result of a BLAS product depends on the kernel, and the kernel on the shape: products of
    fewer than 4 rows take another path and round differently. With at least 8 rows a chunk, a token's
    vector does not depend on which other tokens share its batch (bit for bit: tests/bilm/test_runner.py),
    a short sentence is not padded to ROW_CHUNK rows (work for rows that hold no token), and there are
    at most 8 chunk shapes over a long stream (libraries that cache a kernel per shape stay small). A GPU
    launches a kernel per product, so there it takes GPU_ROW_CHUNK rows at a time.
    """
    full, rest = divmod(n_rows, chunk)
    return [chunk] * full + ([-(-rest // ROW_QUANTUM) * ROW_QUANTUM] if rest else [])


class CharacterEncoder(nn.Module):
    """Maps (n_tokens, max_chars) character ids to (n_tokens, P) token vectors."""

    def __init__(self, options: BiLMOptions) -> None:
        super().__init__()
        self.options = options
        dim = options.char_embedding_dim
        # Row 0 is the "no token" id of the AllenNLP layout and stays zero.
        n_chars = options.char_vocab_size + 1 if options.char_vocab_size else chars.N_CHARACTERS
        self.char_embedding = nn.Parameter(torch.zeros(n_chars, dim))
        self.word_embedding: Optional[nn.Parameter] = (
            nn.Parameter(torch.zeros(options.word_vocab_size + 1, options.word_dim)) if options.word_dim else None
        )
        self.conv_weights = nn.ParameterList([nn.Parameter(torch.zeros(n, dim, width)) for width, n in options.filters])
        self.conv_biases = nn.ParameterList([nn.Parameter(torch.zeros(n)) for _, n in options.filters])
        n_filters = options.n_filters

        def highway(*shape: int) -> nn.ParameterList:
            return nn.ParameterList([nn.Parameter(torch.zeros(*shape)) for _ in range(options.n_highway)])

        self.highway_carry_w, self.highway_carry_b = highway(n_filters, n_filters), highway(n_filters)
        self.highway_transform_w, self.highway_transform_b = highway(n_filters, n_filters), highway(n_filters)
        self.projection_w = nn.Parameter(torch.zeros(options.word_dim + n_filters, options.projection_dim))
        self.projection_b = nn.Parameter(torch.zeros(options.projection_dim))
        self.activation = torch.relu if options.activation == "relu" else torch.tanh

    def reset_parameters(self, generator: Optional[torch.Generator] = None) -> None:
        """Random initialisation for training from scratch."""
        with torch.no_grad():
            self.char_embedding.uniform_(-1.0, 1.0, generator=generator)
            self.char_embedding[0].zero_()
            if self.word_embedding is not None:
                self.word_embedding.uniform_(-0.25, 0.25, generator=generator)
                self.word_embedding[0].zero_()
            for weight, bias in zip(self.conv_weights, self.conv_biases):
                fan_in = weight.shape[1] * weight.shape[2]
                weight.uniform_(-(fan_in**-0.5), fan_in**-0.5, generator=generator)
                bias.zero_()
            for params in (self.highway_carry_w, self.highway_transform_w):
                for w in params:
                    w.normal_(0.0, (1.0 / w.shape[0]) ** 0.5, generator=generator)
            for b in self.highway_transform_b:
                b.zero_()
            for b in self.highway_carry_b:
                # bias the gate towards carrying the input through at the start, as bilm-tf does
                b.fill_(-2.0)
            self.projection_w.normal_(0.0, (1.0 / self.projection_w.shape[0]) ** 0.5, generator=generator)
            self.projection_b.zero_()

    def forward(self, char_ids: torch.Tensor, products: Products = FP32) -> torch.Tensor:
        """char_ids (n_tokens, max_chars) int -> (n_tokens, P), in the chunks of `chunk_rows`."""
        n_rows = char_ids.shape[0]
        sizes = chunk_rows(n_rows, ROW_CHUNK if char_ids.device.type == "cpu" else GPU_ROW_CHUNK)
        if not sizes:
            return self.projection_w.new_zeros(0, self.options.projection_dim)
        padded = sum(sizes)
        if padded > n_rows:  # zero rows ("no token"), cut off again below
            char_ids = nn.functional.pad(char_ids, (0, 0, 0, padded - n_rows))
        kernels = [w.permute(2, 1, 0).reshape(-1, w.shape[0]) for w in self.conv_weights]  # (width*dim, n)
        bias = torch.cat(list(self.conv_biases))
        chunks = [self._encode_chunk(chunk, kernels, bias, products) for chunk in char_ids.split(sizes)]
        return torch.cat(chunks)[:n_rows]

    def encode_pooled(self, pooled: torch.Tensor, words: Optional[torch.Tensor], products: Products) -> torch.Tensor:
        """The max-pooled convolutions, bias added, (n, n_filters) -> (n, P): the activation (after the max:
        both activations are monotonic), the highway, the word embedding (if any) beside it, the projection."""
        x = self.activation(pooled)
        gate_scales_input = self.options.highway_gate == "input"
        for carry_w, carry_b, transform_w, transform_b in zip(
            self.highway_carry_w, self.highway_carry_b, self.highway_transform_w, self.highway_transform_b
        ):
            gate = torch.sigmoid(products.product(x, carry_w, bias=carry_b))
            transformed = torch.relu(products.product(x, transform_w, bias=transform_b))
            if gate_scales_input:  # AllenNLP's: the gate carries the input through
                x = gate * x + (1 - gate) * transformed
            else:  # bilm-tf's naming: the sigmoid "carry" gate scales the relu "transform" branch
                x = gate * transformed + (1.0 - gate) * x
        if words is not None:
            x = torch.cat([words, x], dim=1)
        return products.product(x, self.projection_w, bias=self.projection_b)

    def _encode_chunk(
        self, char_ids: torch.Tensor, kernels: list[torch.Tensor], bias: torch.Tensor, products: Products
    ) -> torch.Tensor:
        words = None
        if self.word_embedding is not None:  # the word id is the last column (`lexicon.py`)
            words = nn.functional.embedding(char_ids[:, -1].long(), self.word_embedding)
            char_ids = char_ids[:, :-1]
        embedded = nn.functional.embedding(char_ids.long(), self.char_embedding)  # (ROW_CHUNK, chars, dim)
        if products.precision in HALF_DTYPES:  # 16-bit operands: cast once here, not in each width's product
            embedded = embedded.to(HALF_DTYPES[products.precision])
        # Each width's convolution as one matrix product over unfolded windows: faster on CPU than conv1d
        # with so few input channels (benchmarks/RESULTS.md, "Other inference figures"), and the same
        # numbers. The bias is added after the max (a constant commutes with it).
        dim = embedded.shape[2]
        pooled: list[torch.Tensor] = []
        for (width, _), kernel, source in zip(self.options.filters, kernels, self.conv_weights):
            windows = embedded.unfold(1, width, 1).transpose(2, 3).reshape(embedded.shape[0], -1, width * dim)
            pooled.append(products.product(windows, kernel, source).amax(dim=1))
        return self.encode_pooled(torch.cat(pooled, dim=1) + bias, words, products)
