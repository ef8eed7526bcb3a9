"""The biLM's matrix products at a chosen precision: the one place `precision` means something.

The biLM spends almost all its time in matrix products (character convolutions as products over
unfolded windows, highway and projection layers, the LSTMs' input, recurrent and projection products).
Every one of them goes through a `Products` object, so a precision is a choice of how to multiply:

- "fp32": the products as they are (the default; bit for bit what the biLM computes without this module);
- "bf16" / "fp16": operands rounded to 16 bits, accumulated in float32 by the library, results returned
  as float32; the elementwise work (cell state, gates, clips, residuals) stays float32. Weights are
  rounded once and kept (no cast per call) unless gradients flow to them (fine-tuning: cast per call).
  "fp16" is for GPUs; CPUs have bf16 units, not fp16 ones;
- "int8": dynamic quantization, CPU only and inference only. Weights are quantized once, per output
  column (symmetric, scale = max |w| / 127); activations per row, at run time. The integer product is
  exact, and the scales are per row and per column, so a token's result does not depend on the other
  rows of its batch, bit for bit. Results are float32.

Prepared weights live in the `Products` object (keyed by the parameter, rebuilt if the parameter
changes), never in the model: saving a model saves its float32 weights whatever the precision.
"""

from typing import Callable, Optional

import torch

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
HALF_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CPU_ONLY = ("int8",)
INT8_MAX = 127.0


def check_precision(precision: object, where: str = "precision") -> str:
    """The precision, or a ValueError that names the allowed ones."""
    if precision not in PRECISIONS:
        allowed = ", ".join(repr(p) for p in PRECISIONS)
        raise ValueError(f"{where} must be one of {allowed}, got {precision!r}")
    return str(precision)


def check_device(precision: str, device: torch.device) -> None:
    if precision in CPU_ONLY and device.type != "cpu":
        raise ValueError(
            f"precision {precision!r} runs on the CPU only (PyTorch has no dynamic int8 products for "
            f"{device.type}); on a GPU use precision 'bf16'"
        )


class Products:
    """float32 products: the torch calls the biLM has always made (fused bias included)."""

    precision = "fp32"

    def addmm(self, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """bias + x (M, K) @ w (K, N)."""
        return torch.addmm(bias, x, w)

    def baddbmm(self, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """bias + x (D, M, K) @ w (D, K, N), one product a direction D."""
        return torch.baddbmm(bias, x, w)

    def bmm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, w)

    def matmul(self, x: torch.Tensor, w: torch.Tensor, source: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x (..., K) @ w (K, N); `source`: the parameter `w` was derived from (the cache key)."""
        return torch.matmul(x, w)


class PreparedProducts(Products):
    """Products with weights converted once and kept, keyed by the parameter they came from."""

    def __init__(self) -> None:
        self._prepared: dict[int, tuple[tuple, object]] = {}

    def prepare_weight(self, w: torch.Tensor) -> object:
        raise NotImplementedError

    def prepared(self, w: torch.Tensor, source: Optional[torch.Tensor] = None) -> object:
        key_tensor = source if source is not None else w
        key = (key_tensor.data_ptr(), key_tensor._version, key_tensor.device, tuple(w.shape))
        cached = self._prepared.get(id(key_tensor))
        if cached is None or cached[0] != key:
            cached = (key, self.prepare_weight(w.detach()))
            self._prepared[id(key_tensor)] = cached
        return cached[1]

    def product(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        source: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """[bias +] x (..., M, K) @ w (K, N), or batched x (D, M, K) @ w (D, K, N): float32 out."""
        raise NotImplementedError

    def addmm(self, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.product(x, w, bias=bias)

    def baddbmm(self, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.product(x, w, bias=bias)

    def bmm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.product(x, w)

    def matmul(self, x: torch.Tensor, w: torch.Tensor, source: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.product(x, w, source)


class HalfProducts(PreparedProducts):
    """bf16 or fp16 operands, float32 results."""

    def __init__(self, precision: str) -> None:
        super().__init__()
        self.precision = precision
        self.dtype = HALF_DTYPES[precision]

    def prepare_weight(self, w: torch.Tensor) -> torch.Tensor:
        return w.to(self.dtype)

    def product(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        source: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        # cast in the graph when gradients flow (fine-tuning reaches the float32 weights), else once
        low: object = w.to(self.dtype) if torch.is_grad_enabled() and w.requires_grad else self.prepared(w, source)
        assert isinstance(low, torch.Tensor)
        x = x.to(self.dtype)
        if bias is None:
            return torch.matmul(x, low).float()
        # the bias added inside the 16-bit product: one pass over the output less than adding it after
        fused = torch.addmm if x.dim() == 2 else torch.baddbmm
        return fused(bias.to(self.dtype), x, low).float()


class Int8Weight:
    """A (K, N) weight as int8 (N, K) rows, one float32 scale per output column."""

    def __init__(self, w: torch.Tensor) -> None:
        w = w.float()
        scale = w.abs().amax(dim=0) / INT8_MAX
        self.scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        self.rows = torch.round(w / self.scale).clamp(-INT8_MAX, INT8_MAX).to(torch.int8).t().contiguous()


# Output columns a product computes at once: an (M, 16384) int32 block does not stay in cache, and
# products as wide as the LSTMs' gates ran 2.7x faster in blocks of 2048 columns on the development CPU.
INT8_COLUMN_BLOCK = 2048


def int8_product(
    x: torch.Tensor, weight: Int8Weight, bias: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """x (M, K) float (+ bias (N,) or (M, N)) -> (M, N) float32 (into `out` if given) through exact
    int8 x int8 -> int32 products, a block of columns at a time, each block scaled (and biased) while
    it is in cache."""
    scale = x.abs().amax(dim=1, keepdim=True) / INT8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    quantized = torch.round(x / scale).to(torch.int8)  # |x / scale| <= 127 by construction
    if out is None:
        out = x.new_empty(x.shape[0], weight.rows.shape[0], dtype=torch.float32)
    for start in range(0, out.shape[1], INT8_COLUMN_BLOCK):
        columns = slice(start, start + INT8_COLUMN_BLOCK)
        block = out[:, columns]
        block.copy_(torch._int_mm(quantized, weight.rows[columns].t()))
        block.mul_(scale).mul_(weight.scale[columns])
        if bias is not None:
            block.add_(bias[..., columns])
    return out


class Int8Products(PreparedProducts):
    precision = "int8"

    def prepare_weight(self, w: torch.Tensor) -> object:
        return [Int8Weight(d) for d in w] if w.dim() == 3 else Int8Weight(w)

    def product(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        source: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if torch.is_grad_enabled() and w.requires_grad:
            raise RuntimeError("precision 'int8' is for inference: its products have no gradient")
        prepared = self.prepared(w, source)
        if isinstance(prepared, list):  # batched: one weight a direction
            out = x.new_empty(len(prepared), x.shape[1], prepared[0].scale.shape[0], dtype=torch.float32)
            for d, weight in enumerate(prepared):
                int8_product(x[d], weight, None if bias is None else bias[min(d, bias.shape[0] - 1)], out[d])
            return out
        assert isinstance(prepared, Int8Weight)
        flat = x.reshape(-1, x.shape[-1])
        return int8_product(flat, prepared, bias).view(*x.shape[:-1], prepared.scale.shape[0])


FP32 = Products()

_MAKERS: dict[str, Callable[[], Products]] = {
    "fp32": lambda: FP32,
    "bf16": lambda: HalfProducts("bf16"),
    "fp16": lambda: HalfProducts("fp16"),
    "int8": Int8Products,
}


def products_for(precision: str) -> Products:
    """A fresh `Products` for a precision (each keeps its own prepared weights)."""
    return _MAKERS[check_precision(precision)]()
