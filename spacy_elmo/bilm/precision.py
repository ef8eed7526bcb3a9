"""The biLM's matrix products at a chosen precision: every product goes through a `Products`.

"fp32" (default); "bf16"/"fp16": 16-bit operands, float32 accumulation, results and elementwise work ("fp16"
is for GPUs); "int8": CPU inference only (`int8.py`). At CPU inference fp32 and bf16 run through oneDNN, each
weight packed once; on a CPU without bf16 instructions, on operands rounded to bf16 (`OneDNNRoundedToBf16`:
torch's bf16 products are emulated there, many times slower). Prepared weights live in the `Products`, never
in the model, so a model always saves float32 weights.
"""

import functools
from typing import Callable, Optional, Protocol, Union

import torch

from ..errors import SettingError
from . import _torch_private
from .int8 import Int8, choose_kernel

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
HALF_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: object) -> str:
    """The precision, or a `SettingError` that names the allowed ones."""
    if precision not in PRECISIONS:
        allowed = ", ".join(repr(p) for p in PRECISIONS)
        raise SettingError(f"must be one of {allowed}, got {precision!r}", "precision")
    return str(precision)


def check_device(precision: str, device: torch.device) -> None:
    """Refuse a precision on a device it is not for (int8: CPUs; fp16: GPUs)."""
    if precision == "int8" and device.type != "cpu":
        raise SettingError(
            f"{precision!r} runs on the CPU only (PyTorch has no dynamic int8 products for "
            f"{device.type}); on a GPU use precision 'bf16'",
            "precision",
        )
    if precision == "fp16" and device.type == "cpu":
        raise SettingError(
            f"{precision!r} is for GPUs (CPUs have no fp16 units: torch emulates its fp16 products "
            "there, slower than fp32); on the CPU use precision 'bf16' or 'fp32'",
            "precision",
        )


def slower_than_fp32_here(precision: str) -> Optional[str]:
    """Why `precision` runs slower than fp32 on this CPU (torch's fallbacks: benchmarks/RESULTS.md, "Reduced
    precision without bf16/VNNI instructions"), or None."""
    if precision == "bf16":  # without bf16 kernels, oneDNN's float32 ones run at fp32's speed
        fp32_packs = _torch_private.linear_unavailable(torch.float32) is None
        return None if fp32_packs else _torch_private.linear_unavailable(torch.bfloat16)
    capability = torch.backends.cpu.get_cpu_capability()
    if precision == "int8" and not capability.startswith("AVX512") and choose_kernel() == "int_mm":
        reason = _torch_private.fbgemm_unavailable() or "fbgemm's products are not exact here"
        return f"this CPU's best torch kernels are {capability}, without AVX-512's int8 products, and {reason}"
    return None


class Strategy(Protocol):
    """How one precision multiplies: [bias +] x @ w, float32 out, for w (K, N), or w (D, K, N) and x (D, M, K).
    `prepare` returns None where the `Products` falls back to its next strategy; equal `kernels`, equal bits."""

    kernels: str = ""
    differentiable: bool = False  # gradients flow through prepare and multiply
    keep: bool = True  # the prepared weight is kept for the next call

    def runs_on(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        return True

    def prepare(self, w: torch.Tensor) -> Optional[object]: ...

    def multiply(self, x: torch.Tensor, prepared: object, bias: Optional[torch.Tensor]) -> torch.Tensor: ...


class TorchFloat(Strategy):
    """float32 through torch's products, the bias fused into them."""

    kernels = "torch"
    differentiable = True
    keep = False  # the weight is its own prepared form

    def prepare(self, w: torch.Tensor) -> torch.Tensor:
        return w

    def multiply(self, x: torch.Tensor, w: object, bias: Optional[torch.Tensor]) -> torch.Tensor:
        assert isinstance(w, torch.Tensor)
        if bias is None:
            return torch.bmm(x, w) if x.dim() == 3 and w.dim() == 3 else torch.matmul(x, w)
        return torch.baddbmm(bias, x, w) if x.dim() == 3 else torch.addmm(bias, x, w)


class TorchHalf(Strategy):
    """bf16 or fp16 operands, float32 results: torch's products on 16-bit copies of the weights."""

    differentiable = True  # the cast is in the graph: fine-tuning reaches the float32 weights

    def __init__(self, precision: str) -> None:
        self.kernels = precision
        self.dtype = HALF_DTYPES[precision]

    def prepare(self, w: torch.Tensor) -> torch.Tensor:
        return w.to(self.dtype)

    def multiply(self, x: torch.Tensor, prepared: object, bias: Optional[torch.Tensor]) -> torch.Tensor:
        assert isinstance(prepared, torch.Tensor)
        x = x.to(self.dtype)
        if bias is None:
            return torch.matmul(x, prepared).float()
        fused = torch.addmm if x.dim() == 2 else torch.baddbmm
        return fused(bias.to(self.dtype), x, prepared).float()


# Rows of the probes of a packed weight's batch independence: the LSTM's floor (`lstm.MIN_GEMM_ROWS`), a
# block and a tail, a long product; then a block's rows at an offset.
PROBE_ROWS = (4, 37, 1031)
PROBE_OFFSET = 5

# On AMX CPUs oneDNN picks its bf16 kernel by the row count, so a row's result can depend on its batch
# (`depends_on_row_count`); there bf16 products run in calls of exactly this many rows, zero rows padding
# the last (benchmarks/RESULTS.md, "bf16 on an AMX CPU").
BLOCK_ROWS = {"bf16": 32}
# The row counts `depends_on_row_count` tries, each tiling the first DETECT_ROWS rows of its probe.
DETECT_COUNTS = (4, 16, 32, 37, 64, 100, 256)
DETECT_ROWS = 512


def onednn_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor], block_rows: Optional[int]
) -> torch.Tensor:
    """`_torch_private.linear` of x (M, K) in calls of exactly `block_rows` rows (zero rows pad the last)."""
    rows = x.shape[0]
    if block_rows is None or rows == block_rows:
        return _torch_private.linear(x, packed, bias)
    padding = -rows % block_rows
    if padding:
        x = torch.cat([x, x.new_zeros(padding, x.shape[1])])
    blocks = [
        _torch_private.linear(x[start : start + block_rows], packed, bias) for start in range(0, x.shape[0], block_rows)
    ]
    return (torch.cat(blocks) if len(blocks) > 1 else blocks[0])[:rows]


@functools.cache
def depends_on_row_count(dtype: torch.dtype) -> bool:
    """Whether oneDNN's product in `dtype` gives a row other bits in products of other row counts (once a
    process; many rows: rounding to bf16 hides most differences of the float32 sums)."""
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(512, 4096, generator=generator)
    try:
        packed = _torch_private.pack(w, dtype)
    except RuntimeError:
        return False  # nothing to block: `pack_for_onednn` refuses such weights
    probe = torch.randn(2 * DETECT_ROWS, w.shape[0], generator=generator).to(dtype)
    longest = _torch_private.linear(probe, packed, None)[:DETECT_ROWS]
    for rows in DETECT_COUNTS:
        tiles = [_torch_private.linear(probe[s : s + rows], packed, None) for s in range(0, DETECT_ROWS, rows)]
        if not torch.equal(torch.cat(tiles)[:DETECT_ROWS], longest):
            return True
    return False


def pack_for_onednn(w: torch.Tensor, dtype: torch.dtype, block_rows: Optional[int] = None) -> Optional[torch.Tensor]:
    """A (K, N) weight packed for `_torch_private.linear`, or None where oneDNN cannot pack it or a row's
    result would depend on the rows beside it (probed as `onednn_linear` multiplies)."""
    try:
        packed = _torch_private.pack(w, dtype)
    except RuntimeError:  # e.g. a dtype this CPU has no instructions for
        return None
    generator = torch.Generator().manual_seed(0)
    probe = torch.randn(PROBE_ROWS[-1], w.shape[0], generator=generator).to(dtype)
    longest = onednn_linear(probe, packed, None, block_rows)
    for rows in [slice(rows) for rows in PROBE_ROWS[:-1]] + [slice(PROBE_OFFSET, PROBE_OFFSET + PROBE_ROWS[1])]:
        if not torch.equal(onednn_linear(probe[rows], packed, None, block_rows), longest[rows]):
            return None
    return packed


class OneDNN(Strategy):
    """fp32 or bf16 CPU inference through oneDNN, each weight packed once (one matrix a direction)."""

    def __init__(self, precision: str) -> None:
        self.kernels = f"onednn-{precision}"
        self.dtype = torch.float32 if precision == "fp32" else HALF_DTYPES[precision]
        blocks = precision in BLOCK_ROWS and depends_on_row_count(self.dtype)
        self.block_rows = BLOCK_ROWS[precision] if blocks else None

    def runs_on(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        return x.device.type == "cpu" and w.dtype == torch.float32

    def prepare(self, w: torch.Tensor) -> Union[None, torch.Tensor, list[torch.Tensor]]:
        """`w` packed (w (D, K, N): a list of D), or None where any matrix fails its probe."""
        matrices = [pack_for_onednn(m, self.dtype, self.block_rows) for m in (w if w.dim() == 3 else [w])]
        packed = [m for m in matrices if m is not None]
        if len(packed) < len(matrices):
            return None
        return packed if w.dim() == 3 else packed[0]

    def multiply(self, x: torch.Tensor, prepared: object, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """x (D, M, K) by a list of D packed matrices, or x (..., K) by one."""
        x = x.to(self.dtype)  # cast once for every direction
        if isinstance(prepared, list):
            out = x.new_empty(len(prepared), x.shape[1], prepared[0].shape[0], dtype=torch.float32)
            for d, matrix in enumerate(prepared):
                # bias (D, M or 1, N), or one (1, ..., N) for every direction
                self.multiply_matrix(x[d], matrix, None if bias is None else bias[min(d, bias.shape[0] - 1)], out[d])
            return out
        assert isinstance(prepared, torch.Tensor)
        flat = x.reshape(-1, x.shape[-1])
        return self.multiply_matrix(flat, prepared, bias, None).view(*x.shape[:-1], prepared.shape[0])

    def multiply_matrix(
        self, x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor], out: Optional[torch.Tensor]
    ) -> torch.Tensor:
        """x (M, K) @ packed -> float32 (M, N), into `out` if given; a bias per row is added in float32."""
        one_row = bias is not None and bias.numel() == packed.shape[0]
        fused = bias.reshape(-1).to(self.dtype).contiguous() if bias is not None and one_row else None
        result = onednn_linear(x.to(self.dtype).contiguous(), packed, fused, self.block_rows)
        if bias is not None and not one_row:
            return torch.add(bias, result, out=out) if out is not None else bias + result
        return out.copy_(result) if out is not None else result.float()


class OneDNNRoundedToBf16(OneDNN):
    """bf16 CPU inference without oneDNN bf16 kernels: float32 products of operands rounded to bf16 (exact in
    float32, so only the order of the sums differs from a bf16 kernel's)."""

    def __init__(self) -> None:
        super().__init__("fp32")
        self.kernels = "onednn-fp32-bf16-rounded"

    def prepare(self, w: torch.Tensor) -> Union[None, torch.Tensor, list[torch.Tensor]]:
        return super().prepare(w.to(torch.bfloat16).float())

    def multiply(self, x: torch.Tensor, prepared: object, bias: Optional[torch.Tensor]) -> torch.Tensor:
        rounded_bias = None if bias is None else bias.to(torch.bfloat16).float()
        return super().multiply(x.to(torch.bfloat16).float(), prepared, rounded_bias)


class Products:
    """The matrix products of one precision: the first of `strategies` that can multiply does (a strategy
    that is not `differentiable` steps aside where gradients flow). Prepared weights are kept here."""

    def __init__(self, precision: str, *strategies: Strategy) -> None:
        self.precision = precision
        self.strategies = strategies
        self.kernels = strategies[0].kernels
        # (kernels, id(parameter)) -> (the parameter, its state when prepared, the prepared weight)
        self._prepared: dict[tuple[str, int], tuple[torch.Tensor, tuple, Optional[object]]] = {}

    def __getstate__(self) -> dict:
        """Copied or pickled without its prepared weights (oneDNN's packed tensors cannot be copied)."""
        return {**self.__dict__, "_prepared": {}}

    def product(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        source: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """`bind` for one call; `source`: the parameter `w` was derived from, if `w` is not one itself."""
        return self.bind(w, x, source)(x, bias)

    def bind(
        self, w: torch.Tensor, like: torch.Tensor, source: Optional[torch.Tensor] = None, grad: Optional[bool] = None
    ) -> Callable[..., torch.Tensor]:
        """(x, bias) -> [bias +] x @ w, the strategy chosen and `w` prepared once for a loop (`like`: an input of
        it). Where gradients flow (`grad`), `w` is prepared at every call, so that the gradient reaches it."""
        if grad is None:
            grad = torch.is_grad_enabled() and (w.requires_grad or like.requires_grad)
        for strategy in self.strategies:
            if strategy.differentiable and (grad or not strategy.keep):
                if grad:
                    return lambda x, bias=None: strategy.multiply(x, strategy.prepare(w), bias)
                fixed = strategy.prepare(w)
                return lambda x, bias=None: strategy.multiply(x, fixed, bias)
            if not grad and strategy.runs_on(like, w):
                prepared = self._prepared_weight(strategy, w, source)
                if prepared is not None:
                    return lambda x, bias=None: strategy.multiply(x, prepared, bias)
        raise RuntimeError(f"precision {self.precision!r} is for inference: its products have no gradient")

    def _prepared_weight(self, strategy: Strategy, w: torch.Tensor, source: Optional[torch.Tensor]) -> Optional[object]:
        """The strategy's prepared `w`, prepared again when its parameter changes (held, so its id stays its own)."""
        parameter = w if source is None else source
        state = (_torch_private.tensor_state(parameter), tuple(w.shape))
        key = (strategy.kernels, id(parameter))
        entry = self._prepared.get(key)
        if entry is None or entry[1] != state:
            entry = (parameter, state, strategy.prepare(w.detach()))
            self._prepared[key] = entry
        return entry[2]


FP32 = Products("fp32", TorchFloat())


def products_for(precision: str) -> Products:
    """A fresh `Products` for a precision (each keeps its own prepared weights)."""
    precision = check_precision(precision)
    if precision == "int8":
        return Products(precision, Int8())
    torch_products: Strategy = TorchFloat() if precision == "fp32" else TorchHalf(precision)
    dtype = HALF_DTYPES.get(precision, torch.float32)
    if precision != "fp16" and _torch_private.linear_unavailable(dtype) is None:
        return Products(precision, OneDNN(precision), torch_products)
    if precision == "bf16" and _torch_private.linear_unavailable(torch.float32) is None:
        return Products(precision, OneDNNRoundedToBf16(), torch_products)
    return Products(precision, torch_products)
