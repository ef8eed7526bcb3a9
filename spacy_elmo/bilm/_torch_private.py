"""Every private torch API the package uses, run only on the torch versions in SUPPORTED_TORCH (as in
pyproject.toml; tests/bilm/test_torch_private.py checks each). Elsewhere each has a public stand-in
(torch's products; `int_mm` in float64, exact for int8 sums; a copy of a tensor's bytes for `_version`),
or, for `scan`, a clear error.
"""

import functools
import re
import warnings
from typing import Any, Callable, Optional

import torch

# torch versions (major, minor) the private APIs run on: from the first, up to but not including the second.
SUPPORTED_TORCH = ((2, 13), (2, 15))

# A bf16 product through oneDNN needs one of these (oneDNN's own check: `_is_mkldnn_bf16_supported`).
BF16_INSTRUCTIONS = "avx_ne_convert, or avx512bw, avx512vl and avx512dq"


def torch_release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string such as "2.13.0+cpu" or "2.14.0a0+git1234"."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a torch version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def supported_torch(version: str) -> bool:
    lowest, first_unsupported = SUPPORTED_TORCH
    return lowest <= torch_release(version) < first_unsupported


def supported_range() -> str:
    (low_major, low_minor), (high_major, high_minor) = SUPPORTED_TORCH
    return f">={low_major}.{low_minor},<{high_major}.{high_minor}"


# Whether this process may call the private APIs (tests turn it off to check the public stand-ins).
ALLOWED = supported_torch(torch.__version__)


def outside_the_range() -> Optional[str]:
    """Why no private API may run here (the installed torch is outside SUPPORTED_TORCH), or None."""
    if ALLOWED:
        return None
    return f"torch {torch.__version__} is outside {supported_range()}, the versions its private APIs run on"


def linear_unavailable(dtype: torch.dtype) -> Optional[str]:
    """Why oneDNN's packed linear product cannot run in `dtype` here, or None where it can."""
    if not ALLOWED:
        return outside_the_range()
    if dtype not in (torch.float32, torch.bfloat16):
        return f"the biLM runs no {dtype} products through oneDNN"
    ops = torch.ops.mkldnn
    names = ("_reorder_linear_weight", "_linear_pointwise")
    if not torch.backends.mkldnn.is_available() or not all(hasattr(ops, name) for name in names):
        return "this torch build has no oneDNN linear operators"
    if dtype == torch.bfloat16 and not (hasattr(ops, "_is_mkldnn_bf16_supported") and ops._is_mkldnn_bf16_supported()):
        return f"this CPU lacks the instructions oneDNN's bf16 products need ({BF16_INSTRUCTIONS})"
    return None


def pack(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A (K, N) float32 weight packed for `linear` in `dtype` (where `linear_unavailable(dtype)` is None)."""
    return torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous().to(dtype), None)


def linear(x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """x (M, K) @ w + bias (N,), in the dtype of the `pack`ed weight."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def qlinear_unavailable() -> Optional[str]:
    """Why oneDNN's packed int8 linear product cannot run here, or None where it can."""
    if not ALLOWED:
        return outside_the_range()
    ops = getattr(torch.ops, "onednn", None)
    if ops is None or not all(hasattr(ops, name) for name in ("qlinear_prepack", "qlinear_pointwise")):
        return "this torch build has no oneDNN int8 linear operators"
    capability = torch.backends.cpu.get_cpu_capability()
    # measured only where int8 pays: benchmarks/RESULTS.md, "Precision on the CPU"
    if not capability.startswith("AVX512"):
        return f"this CPU's best kernels are {capability}, not AVX-512: its int8 products stay `_int_mm`'s"
    return None


def pack_int8(rows: torch.Tensor) -> torch.Tensor:
    """int8 weight rows (N, K) packed once for `qlinear` (only where `qlinear_unavailable()` is None)."""
    return torch.ops.onednn.qlinear_prepack(rows, None)


def qlinear(
    shifted: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor
) -> torch.Tensor:
    """uint8 activations (M, K), int8 + 128, times a `pack_int8` weight: the exact int32 product, each column
    times its scale, (M, N) float32."""
    return torch.ops.onednn.qlinear_pointwise(
        shifted, 1.0, 128, packed, scales, zero_points, None, 1.0, 0, torch.float32, "none", [], ""
    )


def fbgemm_unavailable() -> Optional[str]:
    """Why fbgemm's int8 linear product with a fixed activation scale cannot run here, or None where it can."""
    if not ALLOWED:
        return outside_the_range()
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return "this torch build has no fbgemm"
    names = ("linear_prepack", "linear_with_input_q_dq_qweight_dq_output_fp32")
    if not all(hasattr(torch.ops.quantized, name) for name in names):
        return "this torch build has no fbgemm int8 linear operators"
    return None


def pack_fbgemm(rows: torch.Tensor, scales: torch.Tensor) -> object:
    """int8 weight rows (N, K), one scale a row, packed for `fbgemm_linear` (where `fbgemm_unavailable()` is None)."""
    engine = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = "fbgemm"  # which library packs: the global engine's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's notice that quantized tensors are deprecated
            weight = torch._make_per_channel_quantized_tensor(
                rows, scales.double(), torch.zeros(rows.shape[0], dtype=torch.long), 0
            )
            return torch.ops.quantized.linear_prepack(weight, None)
    finally:
        torch.backends.quantized.engine = engine


def fbgemm_linear(quantized: torch.Tensor, packed: object, zero_point: int) -> torch.Tensor:
    """Activations (M, K) as float32 integers q, taken as uint8 q + `zero_point`, times a `pack_fbgemm` weight:
    the int32 product, each column times its scale, (M, N) float32 (exact where `vpmaddubsw`'s int16 pair sums
    cannot saturate or the CPU has VNNI)."""
    return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        quantized.contiguous(), 1.0, zero_point, packed
    )


def int_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact int32 product of int8 a (M, K) and b (K, N): `torch._int_mm` where exact, else in float64."""
    if int_mm_exact():
        return torch._int_mm(a, b)
    return torch.mm(a.double(), b.double()).to(torch.int32)


def int_mm_exact() -> bool:
    """Whether `torch._int_mm` may run and is exact here. On CPUs without VNNI it runs oneDNN's
    `vpmaddubsw` products, whose int16 sums of pairs saturate for the largest operands."""
    return ALLOWED and hasattr(torch, "_int_mm") and private_int_mm_is_exact()


@functools.cache
def private_int_mm_is_exact() -> bool:
    """`torch._int_mm` of the largest operands, either sign, against the exact product (once a process)."""
    a = torch.full((8, 64), -128, dtype=torch.int8)
    a[1::2] = 127
    b = torch.full((64, 24), -128, dtype=torch.int8)
    b[:, 1::2] = 127
    try:
        got = torch._int_mm(a, b)
    except RuntimeError:
        return False
    return torch.equal(got, (a.long() @ b.long()).to(torch.int32))


# `Tensor._version`, the counter autograd bumps on every in-place change, is on every tensor of every torch
# this package supports; it is not version-gated like the operators above because its stand-in copies a
# whole weight at every use (every forward, outside the range).
VERSION_COUNTER = hasattr(torch.empty(0), "_version")


def tensor_state(tensor: torch.Tensor) -> tuple:
    """A value equal to a later `tensor_state(tensor)` only while the tensor is unchanged (its storage,
    dtype, device, shape, and `Tensor._version`, or a copy of its bytes, where -0.0 is not 0.0)."""
    if VERSION_COUNTER:
        changes: object = tensor._version
    else:
        changes = tensor.detach().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()
    return (changes, tensor.data_ptr(), tensor.dtype, tensor.device, tuple(tensor.shape))


def scan_unavailable() -> Optional[str]:
    """Why torch's `scan` cannot run here, or None where it can."""
    if not ALLOWED:
        return outside_the_range()
    try:
        import torch._higher_order_ops.scan  # noqa: F401
    except ImportError:
        return "this torch build has no `torch._higher_order_ops.scan`"
    return None


def scan(step: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any) -> tuple[Any, Any]:
    """torch's `scan`: `step(carry, x) -> (carry, y)` over the first dimension of `xs`, from `init`; returns
    (the last carry, the ys stacked), exported as one ONNX `Scan` (a Python loop would fix the length)."""
    reason = scan_unavailable()
    if reason is not None:
        raise RuntimeError(f"exporting the biLM to ONNX needs torch's `scan`: {reason}")
    from torch._higher_order_ops.scan import scan as private_scan

    return private_scan(step, init, xs)
