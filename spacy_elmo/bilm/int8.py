"""The int8 precision: dynamic quantization, CPU inference only. Weights per output column, once;
activations per row, at run time. The integer product is exact and the scales are per row and per column,
so a token's result does not depend on its batch, bit for bit.
"""

import contextlib
from typing import Optional

import torch

from . import _torch_private

INT8_MAX = 127.0

# Output columns a product computes at once, so that a wide int32 result is scaled while a block of it is
# in cache (benchmarks/RESULTS.md, "Reduced precision without bf16/VNNI instructions").
INT8_COLUMN_BLOCK = 2048


class Int8Weight:
    """A (K, N) weight quantized to int8, one scale per output column: packed for oneDNN (`pack`, where it
    can be), else int8 (N, K) `rows` for `_int_mm`."""

    def __init__(self, w: torch.Tensor, pack: bool = False) -> None:
        w = w.float()
        scale = w.abs().amax(dim=0) / INT8_MAX
        self.scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        rows = torch.round(w / self.scale).clamp(-INT8_MAX, INT8_MAX).to(torch.int8).t().contiguous()
        self.columns = rows.shape[0]
        self.zero_points = torch.zeros(self.columns, dtype=torch.int32)
        self.packed: Optional[torch.Tensor] = None
        if pack:
            with contextlib.suppress(RuntimeError):  # a CPU or build whose oneDNN cannot pack int8
                self.packed = _torch_private.pack_int8(rows)
        self.rows: Optional[torch.Tensor] = rows if self.packed is None else None


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., M, K) float -> (codes (..., M, K) uint8, scale (..., M, 1) float32): each row symmetric,
    scale = max |row| / 127 (1 for a row of zeros), its integers q in [-127, 127] stored as q + 128 (a
    uint8 with zero point 128: oneDNN's layout; `_int_mm` takes them back as int8)."""
    scale = x.abs().amax(dim=-1, keepdim=True) / INT8_MAX  # faster than linalg.vector_norm's inf norm
    scale = torch.where(scale > 0, scale, 1.0)
    return torch.round(x / scale).add_(128).to(torch.uint8), scale


def int8_product(
    x: torch.Tensor, weight: Int8Weight, bias: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """x (M, K) float (+ bias (N,) or (M, N)) -> (M, N) float32 (into `out` if given) through exact
    int8 x int8 -> int32 products, each scaled by its column's scale, then its row's, then biased."""
    codes, scale = quantize_rows(x)
    result = int8_scaled_product(codes, scale, weight, out)
    return result if bias is None else result.add_(bias)


def int8_scaled_product(
    codes: torch.Tensor, scale: torch.Tensor, weight: Int8Weight, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """`quantize_rows`' (codes (M, K), scale (M, 1)) times the weight, scaled: float32 (M, N), by oneDNN or
    `_int_mm` a block of columns at a time; the two round alike, so they give the same bits."""
    if weight.packed is not None:
        result = _torch_private.qlinear(codes, weight.packed, weight.scale, weight.zero_points)
        return torch.mul(result, scale, out=result if out is None else out)
    assert weight.rows is not None
    quantized = codes.bitwise_xor(128).view(torch.int8)  # q + 128 with its top bit flipped: q
    if out is None:
        out = scale.new_empty(codes.shape[0], weight.columns)
    for start in range(0, out.shape[1], INT8_COLUMN_BLOCK):
        columns = slice(start, start + INT8_COLUMN_BLOCK)
        block = out[:, columns]
        block.copy_(_torch_private.int_mm(quantized, weight.rows[columns].t()))
        block.mul_(weight.scale[columns]).mul_(scale)
    return out


class Int8:
    """The int8 `precision.Strategy` (inference only, no fallback)."""

    kernels = "int8"
    differentiable = False
    keep = True

    def __init__(self, pack: Optional[bool] = None) -> None:
        self.pack = _torch_private.qlinear_unavailable() is None if pack is None else pack

    def runs_on(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        return True

    def prepare(self, w: torch.Tensor) -> object:
        """w (K, N) as one `Int8Weight`, or w (D, K, N) as a list of D, one a direction."""
        return [Int8Weight(d, self.pack) for d in w] if w.dim() == 3 else Int8Weight(w, self.pack)

    def multiply(self, x: torch.Tensor, prepared: object, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """[bias +] x (..., M, K) @ a weight, or x (D, M, K) @ D weights, float32."""
        if isinstance(prepared, Int8Weight):
            flat = x.reshape(-1, x.shape[-1])
            return int8_product(flat, prepared, bias).view(*x.shape[:-1], prepared.columns)
        assert isinstance(prepared, list)
        # every direction at once: the same operations per element, so the same bits
        codes, scale = quantize_rows(x)
        out = x.new_empty(len(prepared), x.shape[1], prepared[0].columns, dtype=torch.float32)
        for d, matrix in enumerate(prepared):
            int8_scaled_product(codes[d], scale[d], matrix, out[d])
        return out if bias is None else out.add_(bias)
