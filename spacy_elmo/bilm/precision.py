"""The biLM's matrix products at a chosen precision: the one place `precision` means something.

The biLM spends almost all its time in matrix products (character convolutions as products over
unfolded windows, highway and projection layers, the LSTMs' input, recurrent and projection products).
Every one of them goes through a `Products` object, so a precision is a choice of how to multiply:

- "fp32": float32 throughout (the default);
- "bf16" / "fp16": operands rounded to 16 bits, accumulated in float32 by the library, results returned
  as float32; the elementwise work (cell state, gates, clips, residuals) stays float32. Weights are
  rounded once and kept (no cast per call) unless gradients flow to them (fine-tuning: cast per call).
  "fp16" is for GPUs; CPUs have bf16 units, not fp16 ones;
- "int8": dynamic quantization, CPU only and inference only. Weights are quantized once, per output
  column (symmetric, scale = max |w| / 127); activations per row, at run time. The integer product is
  exact, and the scales are per row and per column, so a token's result does not depend on the other
  rows of its batch, bit for bit. Results are float32.

How: on the CPU at inference, fp32 and bf16 products run through oneDNN with each weight packed once
(`PackedProducts`): on the development CPU (an AMD EPYC, where MKL takes its AVX2 path) its float32
kernels ran 2-4x faster than torch's MKL products, and its bf16 ones up to 4x faster than torch's bf16
matmul on a few rows. A row's result from oneDNN does not depend on how many rows share the product;
a probe checks that for every weight when it is packed (a weight that fails keeps torch's product).
Where gradients flow (pretraining, fine-tuning), on a GPU, or without oneDNN, torch's own products run
(`FP32`: bit for bit what the biLM computed before this module; `HalfProducts`).

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
    # What made the numbers: two Products with the same `kernels` give the same bits (the token cache's key).
    kernels = "torch"

    def product(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        source: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """[bias +] x (..., M, K) @ w (K, N), or batched x (D, M, K) @ w (D, K, N); `source`: the parameter
        `w` was derived from (the key of prepared weights)."""
        if bias is None:
            return torch.bmm(x, w) if x.dim() == 3 and w.dim() == 3 else torch.matmul(x, w)
        return torch.baddbmm(bias, x, w) if x.dim() == 3 else torch.addmm(bias, x, w)

    def addmm(self, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """bias + x (M, K) @ w (K, N)."""
        return self.product(x, w, bias=bias)

    def baddbmm(self, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """bias + x (D, M, K) @ w (D, K, N), one product a direction D."""
        return self.product(x, w, bias=bias)

    def bmm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.product(x, w)

    def matmul(self, x: torch.Tensor, w: torch.Tensor, source: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x (..., K) @ w (K, N)."""
        return self.product(x, w, source)


class PreparedProducts(Products):
    """Products with weights converted once and kept, keyed by the parameter they came from."""

    def __init__(self) -> None:
        self._prepared: dict[int, tuple[tuple, object]] = {}

    def __getstate__(self) -> dict:
        """Copied or pickled without its prepared weights: they are keyed by the source parameters'
        identity, which a copy does not share, and oneDNN's packed tensors cannot be copied anyway."""
        return {**self.__dict__, "_prepared": {}}

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


class MatrixByMatrixProducts(PreparedProducts):
    """Prepared products computed one (K, N) matrix at a time: a batched weight (D, K, N) is prepared as
    D matrices and multiplied a direction at a time. Subclasses say how to prepare one matrix (None: it
    cannot be) and how to multiply by it."""

    def prepare_matrix(self, w: torch.Tensor) -> Optional[object]:
        raise NotImplementedError

    def multiply(
        self, x: torch.Tensor, matrix: object, bias: Optional[torch.Tensor], out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """bias (N,) or (M, N) + x (M, K) @ the prepared matrix, float32 (M, N), into `out` if given."""
        raise NotImplementedError

    def prepare_weight(self, w: torch.Tensor) -> Optional[list[object]]:
        matrices = [self.prepare_matrix(d) for d in w] if w.dim() == 3 else [self.prepare_matrix(w)]
        return None if any(m is None for m in matrices) else matrices

    def multiply_prepared(
        self, x: torch.Tensor, w: torch.Tensor, matrices: list[object], bias: Optional[torch.Tensor]
    ) -> torch.Tensor:
        """`product` once the weight is prepared: x (D, M, K) by D matrices, or x (..., K) by one."""
        if w.dim() == 3:
            out = x.new_empty(len(matrices), x.shape[1], w.shape[2], dtype=torch.float32)
            for d, matrix in enumerate(matrices):
                # bias (D, M or 1, N), or one (1, ..., N) for every direction
                self.multiply(x[d], matrix, None if bias is None else bias[min(d, bias.shape[0] - 1)], out[d])
            return out
        flat = x.reshape(-1, x.shape[-1])
        return self.multiply(flat, matrices[0], bias).view(*x.shape[:-1], w.shape[1])


def gradient_flows(x: torch.Tensor, w: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and (w.requires_grad or x.requires_grad)


class HalfProducts(PreparedProducts):
    """bf16 or fp16 operands, float32 results: torch's products on 16-bit copies of the weights."""

    def __init__(self, precision: str) -> None:
        super().__init__()
        self.precision = precision
        self.kernels = precision
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
        low: object = w.to(self.dtype) if gradient_flows(x, w) else self.prepared(w, source)
        assert isinstance(low, torch.Tensor)
        x = x.to(self.dtype)
        if bias is None:
            return torch.matmul(x, low).float()
        # the bias added inside the 16-bit product: one pass over the output less than adding it after
        fused = torch.addmm if x.dim() == 2 else torch.baddbmm
        return fused(bias.to(self.dtype), x, low).float()


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's packed linear operators (private ones: checked, not assumed)."""
    ops = torch.ops.mkldnn
    return torch.backends.mkldnn.is_available() and all(
        hasattr(ops, name) for name in ("_reorder_linear_weight", "_linear_pointwise")
    )


# Rows of the probes that check a packed weight's batch independence: the fewest rows the biLM ever
# multiplies (the LSTM's floor, `lstm.MIN_GEMM_ROWS`), a block and a tail, and a long product.
PROBE_ROWS = (4, 37, 1031)


def onednn_linear(x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """x (M, K) @ w + bias (N,) through oneDNN; `packed`: the (N, K) weight as oneDNN packed it."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def pack_for_onednn(w: torch.Tensor, dtype: torch.dtype) -> Optional[torch.Tensor]:
    """A (K, N) weight packed for `onednn_linear` in `dtype`, or None where a row's result would depend
    on how many rows share the product (a probe of PROBE_ROWS rows tells)."""
    packed = torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous().to(dtype), None)
    generator = torch.Generator().manual_seed(0)
    probe = torch.randn(PROBE_ROWS[-1], w.shape[0], generator=generator).to(dtype)
    longest = onednn_linear(probe, packed, None)
    for rows in PROBE_ROWS[:-1]:  # every row, those of a short product's tail block included
        if not torch.equal(onednn_linear(probe[:rows], packed, None), longest[:rows]):
            return None
    return packed


class PackedProducts(MatrixByMatrixProducts):
    """CPU inference through oneDNN, each weight packed once: its float32 kernels ran 2-4x faster than
    MKL's on the development CPU (AMD, where MKL takes its AVX2 path) and its bf16 ones up to 4x faster
    than torch's bf16 matmul at a few rows. Where gradients flow, on other devices, or where a weight's
    probe failed, `fallback` computes the product."""

    def __init__(self, precision: str, fallback: Products) -> None:
        super().__init__()
        self.precision = precision
        self.kernels = f"onednn-{precision}"
        self.dtype = torch.float32 if precision == "fp32" else HALF_DTYPES[precision]
        self.fallback = fallback

    def prepare_matrix(self, w: torch.Tensor) -> Optional[torch.Tensor]:
        return pack_for_onednn(w, self.dtype)

    def product(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        source: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if gradient_flows(x, w) or x.device.type != "cpu" or w.dtype != torch.float32:
            return self.fallback.product(x, w, source, bias)
        packed = self.prepared(w, source)
        if packed is None:
            return self.fallback.product(x, w, source, bias)
        assert isinstance(packed, list)
        return self.multiply_prepared(x, w, packed, bias)

    def multiply(
        self, x: torch.Tensor, matrix: object, bias: Optional[torch.Tensor], out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """A bias of one row is fused into oneDNN's product, a bias per row (the LSTM's input products)
        added in float32 after it."""
        assert isinstance(matrix, torch.Tensor)
        one_row = bias is not None and bias.numel() == matrix.shape[0]
        fused = bias.reshape(-1).to(self.dtype).contiguous() if bias is not None and one_row else None
        result = onednn_linear(x.to(self.dtype).contiguous(), matrix, fused)
        if bias is not None and not one_row:
            return torch.add(bias, result, out=out) if out is not None else bias + result
        return out.copy_(result) if out is not None else result.float()


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


class Int8Products(MatrixByMatrixProducts):
    precision = "int8"
    kernels = "int8"

    def prepare_matrix(self, w: torch.Tensor) -> Int8Weight:
        return Int8Weight(w)

    def product(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        source: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if gradient_flows(x, w):
            raise RuntimeError("precision 'int8' is for inference: its products have no gradient")
        matrices = self.prepared(w, source)
        assert isinstance(matrices, list)
        return self.multiply_prepared(x, w, matrices, bias)

    def multiply(
        self, x: torch.Tensor, matrix: object, bias: Optional[torch.Tensor], out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        assert isinstance(matrix, Int8Weight)
        return int8_product(x, matrix, bias, out)


FP32 = Products()

_MAKERS: dict[str, Callable[[], Products]] = {
    "fp32": lambda: PackedProducts("fp32", FP32) if onednn_available() else FP32,
    "bf16": lambda: PackedProducts("bf16", HalfProducts("bf16")) if onednn_available() else HalfProducts("bf16"),
    "fp16": lambda: HalfProducts("fp16"),
    "int8": Int8Products,
}


def products_for(precision: str) -> Products:
    """A fresh `Products` for a precision (each keeps its own prepared weights)."""
    return _MAKERS[check_precision(precision)]()
