"""The contextual layers: stacked LSTMs with a projection, both directions computed together.

Numerics follow TensorFlow's `LSTMCell(num_proj=P, cell_clip, proj_clip, forget_bias=1.0)` as used
by bilm-tf: gates in the order i, j, f, o; the forget bias (option `forget_bias`: 1.0 for bilm-tf, 0 for
AllenNLP-parametrised weights, whose bias already holds it) added at run time; the cell clipped, then
the projected output clipped; a residual connection around every layer but the first.

The input products of all steps and both directions run ahead of the loop; the loop does the recurrent
product, the cell and the projection. The backward direction reads each row reversed within its length, so
both directions share one loop. On the CPU the loop's batch shrinks as rows (longest first) end; on a GPU
(`forward_static`) every row runs every step, so the loop's kernels are the same for any lengths and are
captured once as a CUDA graph (`cuda_graphs.py`), with operands kept in the products' precision.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from . import _torch_private
from .cuda_graphs import GraphCache
from .options import BiLMOptions
from .precision import FP32, HALF_DTYPES, Products

FORWARD, BACKWARD = 0, 1


def lstm_cell(gates: torch.Tensor, c: torch.Tensor, cell_clip: Optional[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """The elementwise half of a step (the forget bias is already in `gates`): returns (m, new c)."""
    i, j, f, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
    if cell_clip is not None:
        c = c.clamp(-cell_clip, cell_clip)
    return torch.sigmoid(o) * torch.tanh(c), c


# CPU BLAS takes another code path (and so another summation order) for products of fewer than 4
# rows; keeping every product at 4 rows or more makes a row's result independent of how many rows
# share its batch.
MIN_GEMM_ROWS = 4


@dataclass
class LSTMState:
    """Recurrent state of every layer and direction: h (L, 2, B, P), c (L, 2, B, C)."""

    h: torch.Tensor
    c: torch.Tensor


def reverse_within_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row of x (B, T, ...) within its first lengths[b] steps; padding stays in place."""
    n_rows, n_steps = x.shape[0], x.shape[1]
    steps = torch.arange(n_steps, device=x.device).expand(n_rows, n_steps)
    lengths = lengths.to(x.device).unsqueeze(1)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)
    index = index.view(n_rows, n_steps, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


class BiLSTMStack(nn.Module):
    """L layers of projected LSTMs, a forward and a backward stack, parameters stacked by direction."""

    def __init__(self, options: BiLMOptions) -> None:
        super().__init__()
        self.options = options
        P, C, L = options.projection_dim, options.lstm_dim, options.n_layers
        # W_0 of bilm-tf split into its input rows and its recurrent rows; direction is dim 0.
        self.input_w = nn.ParameterList([nn.Parameter(torch.zeros(2, P, 4 * C)) for _ in range(L)])
        self.recurrent_w = nn.ParameterList([nn.Parameter(torch.zeros(2, P, 4 * C)) for _ in range(L)])
        self.bias = nn.ParameterList([nn.Parameter(torch.zeros(2, 4 * C)) for _ in range(L)])
        self.proj_w = nn.ParameterList([nn.Parameter(torch.zeros(2, C, P)) for _ in range(L)])
        forget = torch.zeros(4 * C)
        forget[2 * C : 3 * C] = options.forget_bias  # bilm-tf: 1.0; AllenNLP's parametrisation: 0
        self.register_buffer("forget_bias", forget, persistent=False)
        self.cell = lstm_cell
        self.cuda_graphs = GraphCache()  # `forward_static` at inference; `.enabled = False` turns graphs off
        # the weights in a precision's dtype for `forward_static` at inference: (dtype, the parameters' states,
        # one (w_in, w_rec, w_proj, bias) a layer), refreshed in place so captured graphs stay valid
        self._static_weights: dict[torch.dtype, tuple[tuple, list[tuple[torch.Tensor, ...]]]] = {}

    def compile_cell(self, enable: bool = True) -> None:
        """Fuse the cell's elementwise work with torch.compile (for long GPU runs; equal up to rounding)."""
        self.cell = torch.compile(lstm_cell, dynamic=True) if enable else lstm_cell

    def reset_parameters(self, generator: Optional[torch.Generator] = None) -> None:
        with torch.no_grad():
            for group in (self.input_w, self.recurrent_w, self.proj_w):
                for w in group:
                    bound = (6.0 / (w.shape[1] + w.shape[2])) ** 0.5
                    w.uniform_(-bound, bound, generator=generator)
            for b in self.bias:
                b.zero_()

    def zero_state(self, batch_size: int, device: torch.device, dtype: torch.dtype = torch.float32) -> LSTMState:
        o = self.options
        return LSTMState(
            h=torch.zeros(o.n_layers, 2, batch_size, o.projection_dim, device=device, dtype=dtype),
            c=torch.zeros(o.n_layers, 2, batch_size, o.lstm_dim, device=device, dtype=dtype),
        )

    def forward(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        initial_state: Optional[LSTMState] = None,
        return_final_state: bool = False,
        dropout: float = 0.0,
        products: Products = FP32,
    ) -> tuple[list[torch.Tensor], Optional[LSTMState]]:
        """tokens (B, T, P), lengths (B,) -> one (B, T, 2P) tensor a layer ([forward; backward]), zero at and past
        each row's length; and if asked, the final state (at each row's length; the initial one for empty rows)."""
        if tokens.device.type == "cuda" and tokens.shape[0] and int(lengths.max()) > 0:
            return self.forward_static(tokens, lengths, initial_state, return_final_state, dropout, products)
        # the CPU's loop: rows sorted longest first, the batch shrinking as they end
        n_rows = tokens.shape[0]
        lengths_cpu = lengths.detach().to("cpu", torch.long)
        order = torch.argsort(lengths_cpu, descending=True, stable=True)
        sorted_lengths = lengths_cpu[order]
        # batch_sizes[t]: rows still running at step t (rows are sorted longest first)
        n_steps = int(sorted_lengths[0]) if n_rows else 0
        batch_sizes = (sorted_lengths.unsqueeze(0) > torch.arange(n_steps).unsqueeze(1)).sum(1).tolist()
        order_dev = order.to(tokens.device)
        x = tokens.index_select(0, order_dev)[:, :n_steps]
        lengths_dev = sorted_lengths.to(tokens.device)
        both = torch.stack([x, reverse_within_lengths(x, lengths_dev)])  # (2, B, T, P)
        frames = both.transpose(1, 2).contiguous()  # time-major (2, T, B, P)
        state = initial_state or self.zero_state(n_rows, tokens.device, tokens.dtype)
        h0, c0 = state.h[:, :, order_dev], state.c[:, :, order_dev]
        final = LSTMState(h0.clone(), c0.clone()) if return_final_state else None  # filled by `_run_layer`
        dropout = dropout if self.training else 0.0
        layer_outputs: list[torch.Tensor] = []
        for layer in range(self.options.n_layers):
            inputs = nn.functional.dropout(frames, dropout, training=True) if dropout > 0.0 else frames
            out = self._run_layer(layer, inputs, batch_sizes, h0[layer], c0[layer], final, products)
            if self.options.use_skip_connections and layer > 0:
                out = out + frames
            frames = out
            layer_outputs.append(out)
        unsort = torch.argsort(order_dev)
        results = [merge_directions(out, lengths_dev, tokens, unsort) for out in layer_outputs]
        if final is not None:
            final = LSTMState(final.h[:, :, unsort], final.c[:, :, unsort])
        return results, final

    def forward_static(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        initial_state: Optional[LSTMState],
        return_final_state: bool,
        dropout: float,
        products: Products,
    ) -> tuple[list[torch.Tensor], Optional[LSTMState]]:
        """`forward` with every row running every step (the GPU's loop, through `cuda_graphs` at inference without
        dropout): a row's state stops at its length, its outputs past it are zero. Operands stay in the products'
        dtype (or the autocast dtype) from the first product to the last, the cell's state in float32."""
        n_rows = tokens.shape[0]
        lengths = lengths.to(tokens.device, torch.long)
        n_steps = int(lengths.max())  # at least 1: `forward` takes batches without tokens
        if torch.is_autocast_enabled(tokens.device.type):  # then autocast's dtype, else the products' precision
            dtype = torch.get_autocast_dtype(tokens.device.type)
        else:
            dtype = HALF_DTYPES.get(products.precision, tokens.dtype)
        x = tokens[:, :n_steps]
        frames = torch.stack([x, reverse_within_lengths(x, lengths)]).transpose(1, 2).to(dtype).contiguous()
        running = (torch.arange(n_steps, device=tokens.device).unsqueeze(1) < lengths.unsqueeze(0)).unsqueeze(-1)
        state = initial_state or self.zero_state(n_rows, tokens.device)
        h0, c0 = state.h.to(dtype), state.c.to(torch.promote_types(dtype, torch.float32))
        grad = torch.is_grad_enabled() and (tokens.requires_grad or any(p.requires_grad for p in self.parameters()))
        weights = self._weights_in(dtype, grad)
        dropout = dropout if self.training else 0.0

        def layers(frames: torch.Tensor, running: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> tuple:
            return self._static_layers(frames, running, h0, c0, weights, return_final_state, dropout)

        if grad or dropout > 0.0:
            outputs, final_h, final_c = layers(frames, running, h0, c0)
        else:
            key = (n_rows, n_steps, dtype, return_final_state)
            outputs, final_h, final_c = self.cuda_graphs(key, layers, (frames, running, h0, c0))
        results = [merge_directions(out, lengths, tokens) for out in outputs]
        final = None
        if return_final_state:  # copies: a graph's outputs are overwritten by its next replay
            final = LSTMState(final_h.to(tokens.dtype, copy=True), final_c.to(tokens.dtype, copy=True))
        return results, final

    def _weights_in(self, dtype: torch.dtype, grad: bool) -> list[tuple[torch.Tensor, ...]]:
        """(w_in, w_rec, w_proj, bias + forget bias) a layer in `dtype`: cast in the graph where gradients flow,
        else kept (and refreshed in place when a parameter changes, so graphs captured on them stay valid)."""
        if grad:
            return [self._layer_weights(layer, dtype) for layer in range(self.options.n_layers)]
        states = tuple(_torch_private.tensor_state(p) for p in self.parameters())
        kept = self._static_weights.get(dtype)
        if kept is None or kept[0] != states:
            with torch.no_grad():
                fresh = [self._layer_weights(layer, dtype) for layer in range(self.options.n_layers)]
                if kept is not None and kept[1][0][0].device == fresh[0][0].device:
                    for old, new in zip(kept[1], fresh):  # a stack's shapes never change
                        for a, b in zip(old, new):
                            a.copy_(b)
                    fresh = kept[1]
                else:
                    self.cuda_graphs.clear()  # graphs read the kept weights where they were
                self._static_weights[dtype] = (states, fresh)
            kept = self._static_weights[dtype]
        return kept[1]

    def layer_bias(self, layer: int) -> torch.Tensor:
        """The layer's gate bias with the forget bias added, (2, 1, 4C)."""
        return (self.bias[layer] + self.forget_bias.to(self.bias[layer].dtype)).unsqueeze(1)

    def _layer_weights(self, layer: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        weights = (self.input_w[layer], self.recurrent_w[layer], self.proj_w[layer], self.layer_bias(layer))
        # fresh tensors even where the dtype is the parameter's, so that refreshing in place never writes a weight
        return tuple(w.to(dtype, copy=not torch.is_grad_enabled()) for w in weights)

    def _static_layers(
        self,
        frames: torch.Tensor,
        running: torch.Tensor,
        h0: torch.Tensor,
        c0: torch.Tensor,
        weights: list[tuple[torch.Tensor, ...]],
        track_final: bool,
        dropout: float,
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Every layer on time-major frames (2, T, B, P) with `running` (T, B, 1) true while a row has tokens:
        the layers' outputs (2, T, B, P), zero past each length, and the final h (L, 2, B, P) and c."""
        o = self.options
        n_steps = frames.shape[1]
        outputs: list[torch.Tensor] = []
        final_h: list[torch.Tensor] = []
        final_c: list[torch.Tensor] = []
        stopped = ~running
        for layer, (w_in, w_rec, w_proj, bias) in enumerate(weights):
            inputs = nn.functional.dropout(frames, dropout, training=True) if dropout > 0.0 else frames
            _, _, n_rows, P = inputs.shape
            pre = torch.baddbmm(bias, inputs.reshape(2, n_steps * n_rows, P), w_in).view(2, n_steps, n_rows, -1)
            h, c = h0[layer], c0[layer]
            steps = []
            for t in range(n_steps):
                m, c_next = self.cell(torch.baddbmm(pre[:, t], h, w_rec), c, o.cell_clip)
                h_next = torch.bmm(m.to(w_proj.dtype), w_proj)
                if o.proj_clip is not None:
                    h_next = h_next.clamp(-o.proj_clip, o.proj_clip)
                steps.append(h_next)
                if track_final:  # a row's state stops at its length
                    h, c = torch.where(running[t], h_next, h), torch.where(running[t], c_next, c)
                else:
                    h, c = h_next, c_next
            out = torch.stack(steps, dim=1).masked_fill(stopped, 0.0)
            if o.use_skip_connections and layer > 0:
                out = out + frames
            frames = out
            outputs.append(out)
            final_h.append(h)
            final_c.append(c)
        return outputs, torch.stack(final_h), torch.stack(final_c)

    def _run_layer(
        self,
        layer: int,
        inputs: torch.Tensor,
        batch_sizes: list[int],
        h: torch.Tensor,
        c: torch.Tensor,
        final: Optional[LSTMState],
        products: Products = FP32,
    ) -> torch.Tensor:
        """One layer, both directions, from state (h, c): inputs (2, T, B, P) -> outputs, zero past each length;
        each row's state at its length written into the layer's entry of `final`, if given."""
        o = self.options
        _, n_steps, n_rows, P = inputs.shape
        w_in, w_rec, w_proj = self.input_w[layer], self.recurrent_w[layer], self.proj_w[layer]
        bias = self.layer_bias(layer)
        # Every product has at least MIN_GEMM_ROWS rows: a batch with fewer is padded once here, and rows
        # that run out of tokens leave the batch only down to that floor (rows kept past their end
        # compute on padding, are zeroed in the output, and their final state was taken when they ended).
        if n_rows < MIN_GEMM_ROWS:
            inputs, h, c = (nn.functional.pad(t, (0, 0, 0, MIN_GEMM_ROWS - n_rows)) for t in (inputs, h, c))
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (inputs, bias, h, c, w_in, w_rec, w_proj))
        pre_steps = self._input_products(inputs, w_in, bias, batch_sizes, grad, products)
        # The steps' products, their strategy chosen and weights prepared once for the loop.
        recurrent = products.bind(w_rec, inputs, grad=grad)
        projection = products.bind(w_proj, inputs, grad=grad)
        steps: list[torch.Tensor] = []
        cell_clip, proj_clip = o.cell_clip, o.proj_clip
        running = n_rows
        for t in range(n_steps):
            n = batch_sizes[t]
            if n < running:
                if final is not None:
                    final.h[layer, :, n:running] = h[:, n:running]
                    final.c[layer, :, n:running] = c[:, n:running]
                running = n
                if max(n, MIN_GEMM_ROWS) < h.shape[1]:
                    h, c = h[:, : max(n, MIN_GEMM_ROWS)], c[:, : max(n, MIN_GEMM_ROWS)]
            gates = recurrent(h, next(pre_steps)[:, : h.shape[1]])
            m, c = self.cell(gates, c, cell_clip)
            h = projection(m)
            if proj_clip is not None:
                h = h.clamp(-proj_clip, proj_clip)
            # a view while every row runs (the stack below copies once); rows that ended: zeros
            steps.append(h[:, :n_rows] if n == n_rows else nn.functional.pad(h[:, :n], (0, 0, 0, n_rows - n)))
        if final is not None and n_steps:
            final.h[layer, :, :running] = h[:, :running]
            final.c[layer, :, :running] = c[:, :running]
        return torch.stack(steps, dim=1) if steps else inputs.new_zeros(2, 0, n_rows, P)

    def _input_products(
        self,
        inputs: torch.Tensor,
        w_in: torch.Tensor,
        bias: torch.Tensor,
        batch_sizes: list[int],
        grad: bool,
        products: Products,
    ) -> Iterator[torch.Tensor]:
        """Each step's input products (2, rows, 4C), bias included: all steps at once where gradients flow or
        off the CPU, else `input_chunk_steps` steps at a time without the rows that ended before."""
        _, n_steps, rows, P = inputs.shape
        four_c = w_in.shape[-1]
        whole = grad or inputs.device.type != "cpu"
        chunk = n_steps if whole else input_chunk_steps(rows, four_c)
        product = products.bind(w_in, inputs)
        for start in range(0, n_steps, chunk):
            stop = min(start + chunk, n_steps)
            kept = rows if whole else max(batch_sizes[start], MIN_GEMM_ROWS)
            x = inputs[:, start:stop, :kept].reshape(2, (stop - start) * kept, P)
            # One view a step: the backward of `unbind` stacks the steps' gradients once, where indexing
            # the result in the loop would allocate and add a gradient the size of all of it every step.
            yield from product(x, bias).view(2, stop - start, kept, four_c).unbind(1)


def merge_directions(
    out: torch.Tensor, lengths: torch.Tensor, tokens: torch.Tensor, unsort: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """A layer's time-major output (2, T, B, P) -> (B, T_tokens, 2P) in the tokens' dtype, the backward half
    read back into text order, rows back in their input order (`unsort`), padded to the tokens' length."""
    out = out.transpose(1, 2)  # (2, B, T, P)
    backward = reverse_within_lengths(out[BACKWARD], lengths)
    merged = torch.cat([out[FORWARD], backward], dim=-1).to(tokens.dtype)
    if unsort is not None:
        merged = merged.index_select(0, unsort)
    if merged.shape[1] < tokens.shape[1]:
        merged = nn.functional.pad(merged, (0, 0, 0, tokens.shape[1] - merged.shape[1]))
    return merged


# The most bytes of input products computed at once at CPU inference: glibc serves larger blocks with
# fresh pages at every call (benchmarks/RESULTS.md, "LSTM input products in chunks of steps").
INPUT_CHUNK_BYTES = 16 << 20


def input_chunk_steps(rows: int, four_c: int) -> int:
    """Steps whose input products (both directions, `rows` rows, float32) fit in INPUT_CHUNK_BYTES."""
    return max(1, INPUT_CHUNK_BYTES // (2 * rows * four_c * 4))
