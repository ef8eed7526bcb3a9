"""The int8 precision: dynamic quantization, CPU inference only. Weights per output column, once;
activations per row, at run time. The integer product is exact and the scales are per row and per column,
so a token's result does not depend on its batch, bit for bit.

The kernel is chosen by the CPU (`choose_kernel`). Without VNNI, integer products (`vpmaddubsw`) sum pairs
in int16, saturating, so there weights keep to 7 bits (`weight_levels`). Every kernel computes the same
exact integers, so on one CPU they give the same bits.
"""

import contextlib
import functools
from typing import Optional

import torch

from . import _torch_private

INT8_MAX = 127.0

# Weight levels (|w| <= levels) where torch's kernels are not AVX-512 ones: a pair of products of
# activation codes q + 128 <= 255 and weights |w| <= 63 fits int16, so AVX2's `vpmaddubsw` is exact.
SEVEN_BIT_LEVELS = 63.0
# The uint8 zero point of the activation codes (int8 q stored as q + 128: oneDNN's and fbgemm's layout).
ZERO_POINT = 128

# Output columns a product computes at once, so that a wide int32 result is scaled while a block of it is
# in cache (benchmarks/RESULTS.md, "Reduced precision without bf16/VNNI instructions").
INT8_COLUMN_BLOCK = 2048

KERNELS = ("onednn", "fbgemm", "int_mm")


def weight_levels() -> float:
    """The largest weight code: 127 where torch's kernels are AVX-512 ones (`ATEN_CPU_CAPABILITY` caps them),
    else 63. Fixed by the CPU, never by the kernel, so every kernel on one CPU gives the same bits."""
    return INT8_MAX if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else SEVEN_BIT_LEVELS


@functools.cache
def fbgemm_exact(levels: float) -> bool:
    """Whether fbgemm's product is exact here for weights up to `levels` (once a process): the largest
    activation codes times the largest weights, which a saturating kernel would clip."""
    if _torch_private.fbgemm_unavailable() is not None:
        return False
    k, n = 64, 48
    rows = torch.full((n, k), int(levels), dtype=torch.int8)
    rows[1::2] = -int(levels)
    rows[2::3, ::5] = 3
    quantized = torch.full((5, k), INT8_MAX)
    quantized[1::2] = -INT8_MAX
    quantized[:, ::7] = 1.0
    try:
        packed = _torch_private.pack_fbgemm(rows, torch.ones(n))
        got = _torch_private.fbgemm_linear(quantized, packed, ZERO_POINT)
    except RuntimeError:
        return False
    exact = torch.mm(quantized.double(), rows.t().double()).float()
    return torch.equal(got, exact)


def choose_kernel() -> str:
    """The int8 kernel for this CPU: oneDNN's where it runs, else fbgemm's where it is exact, else `_int_mm`."""
    if _torch_private.qlinear_unavailable() is None:
        return "onednn"
    if _torch_private.fbgemm_unavailable() is None and fbgemm_exact(weight_levels()):  # the probe is cached
        return "fbgemm"
    return "int_mm"


class Int8Weight:
    """A (K, N) weight as integers in [-levels, levels], one scale per output column: packed for oneDNN
    (`pack`) or fbgemm (`fbgemm`) where it can be, else int8 (N, K) `rows` for `_int_mm`."""

    def __init__(self, w: torch.Tensor, pack: bool = False, fbgemm: bool = False, levels: float = INT8_MAX) -> None:
        w = w.float()
        scale = w.abs().amax(dim=0) / levels
        self.scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        rows = torch.round(w / self.scale).clamp(-levels, levels).to(torch.int8).t().contiguous()
        self.columns = rows.shape[0]
        self.zero_points = torch.zeros(self.columns, dtype=torch.int32)
        self.packed: Optional[torch.Tensor] = None
        self.fbgemm: Optional[object] = None
        with contextlib.suppress(RuntimeError):  # a CPU or build whose oneDNN or fbgemm cannot pack int8
            if pack:
                self.packed = _torch_private.pack_int8(rows)
            elif fbgemm:
                self.fbgemm = _torch_private.pack_fbgemm(rows, self.scale)
        self.rows: Optional[torch.Tensor] = rows if self.packed is None and self.fbgemm is None else None


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., M, K) float -> (q (..., M, K), scale (..., M, 1)) float32: each row symmetric, scale = max |row| /
    127 (1 for a row of zeros), q in [-127, 127]."""
    scale = x.abs().amax(dim=-1, keepdim=True) / INT8_MAX  # faster than linalg.vector_norm's inf norm
    scale = torch.where(scale > 0, scale, 1.0)
    return torch.round(x / scale), scale


def int8_product(
    x: torch.Tensor, weight: Int8Weight, bias: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """[bias (N,) or (M, N) +] x (M, K) @ the weight -> (M, N) float32, through exact int32 products."""
    return scaled_product(*quantize_rows(x), weight, bias, out)


def scale_rows(
    result: torch.Tensor, scale: torch.Tensor, bias: Optional[torch.Tensor], out: Optional[torch.Tensor]
) -> torch.Tensor:
    """[bias +] result (M, N) * scale (M, 1) in one pass: every kernel's last step, so that they round alike."""
    target = result if out is None else out
    if bias is None:
        return torch.mul(result, scale, out=target)
    return torch.addcmul(bias, result, scale, out=target)


def scaled_product(
    quantized: torch.Tensor,
    scale: torch.Tensor,
    weight: Int8Weight,
    bias: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """`quantize_rows`' (q (M, K), scale (M, 1)) times the weight, scaled and biased: float32 (M, N). Every kernel
    computes the int32 products exactly and scales them alike, so all give the same bits."""
    if weight.fbgemm is not None:
        return scale_rows(_torch_private.fbgemm_linear(quantized, weight.fbgemm, ZERO_POINT), scale, bias, out)
    if weight.packed is not None:  # oneDNN takes q + 128: a uint8 with zero point 128
        codes = quantized.add(ZERO_POINT).to(torch.uint8)
        result = _torch_private.qlinear(codes, weight.packed, weight.scale, weight.zero_points)
        return scale_rows(result, scale, bias, out)
    assert weight.rows is not None
    integers = quantized.to(torch.int8)
    if out is None:
        out = scale.new_empty(quantized.shape[0], weight.columns)
    for start in range(0, out.shape[1], INT8_COLUMN_BLOCK):
        columns = slice(start, start + INT8_COLUMN_BLOCK)
        block = out[:, columns]
        block.copy_(_torch_private.int_mm(integers, weight.rows[columns].t())).mul_(weight.scale[columns])
        scale_rows(block, scale, None if bias is None else bias[..., columns], block)
    return out


class Int8:
    """The int8 `precision.Strategy` (inference only, no fallback): `kernel` one of KERNELS (`pack`: oneDNN's
    or `_int_mm`), weights in [-levels, levels]; both by default this CPU's."""

    differentiable = False
    keep = True

    def __init__(
        self, pack: Optional[bool] = None, kernel: Optional[str] = None, levels: Optional[float] = None
    ) -> None:
        if kernel is None:
            kernel = choose_kernel() if pack is None else "onednn" if pack else "int_mm"
        if kernel not in KERNELS:
            raise ValueError(f"int8 kernel must be one of {', '.join(map(repr, KERNELS))}, got {kernel!r}")
        self.kernel = kernel
        self.levels = weight_levels() if levels is None else levels
        # every kernel computes the same integers: the bits depend on the weights' levels only
        self.kernels = "int8" if self.levels == weight_levels() else f"int8-weights-{int(self.levels)}"

    def runs_on(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        return True

    def prepare(self, w: torch.Tensor) -> object:
        """w (K, N) as one `Int8Weight`, or w (D, K, N) as a list of D, one a direction."""
        pack, fbgemm = self.kernel == "onednn", self.kernel == "fbgemm"
        if w.dim() == 3:
            return [Int8Weight(d, pack, fbgemm, self.levels) for d in w]
        return Int8Weight(w, pack, fbgemm, self.levels)

    def multiply(self, x: torch.Tensor, prepared: object, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """[bias +] x (..., M, K) @ a weight, or x (D, M, K) @ D weights, float32."""
        if isinstance(prepared, Int8Weight):
            return int8_product(x.reshape(-1, x.shape[-1]), prepared, bias).view(*x.shape[:-1], prepared.columns)
        assert isinstance(prepared, list)
        # every direction quantized at once: the same operations per element, so the same bits
        out = x.new_empty(len(prepared), x.shape[1], prepared[0].columns, dtype=torch.float32)
        quantized, scale = quantize_rows(x)
        for d, matrix in enumerate(prepared):
            # bias (D, M or 1, N), or one (..., N) for every direction
            bias_d = None if bias is None else bias[min(d, bias.shape[0] - 1)] if bias.dim() == 3 else bias
            scaled_product(quantized[d], scale[d], matrix, bias_d, out[d])
        return out
