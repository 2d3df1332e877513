"""onnxruntime's com.microsoft fused transformer ops, which its transformer optimizer
(onnxruntime.transformers.optimizer.optimize_model) writes in place of the subgraphs an
exported BERT, GPT-2, ViT or LLaMA is made of: Gelu, FastGelu, BiasGelu, QuickGelu,
SkipLayerNormalization, SkipSimplifiedLayerNormalization, and SimplifiedLayerNormalization
(an onnxruntime-only op that onnxruntime registers in ONNX's own domain). Each is the
device kernels of the ops it fuses. (BiasAdd is left out: onnxruntime's CPU provider has no
kernel for it, so no model that onnxruntime runs on the CPU holds one.)

Semantics, as onnxruntime's CPU kernels compute them:
- Gelu and BiasGelu: the erf form of gelu, of x and of A + B. FastGelu: the tanh form of
  x (+ bias). A bias is 1-D, one value per element of the last axis.
- QuickGelu: x * sigmoid(alpha * x), alpha 1.702 by default.
- SkipLayerNormalization: h = input + skip (+ bias), then LayerNormalization of h over the
  last axis, times gamma (+ beta); epsilon 1e-12 by default. skip has the input's shape or
  broadcasts to it without growing it (onnxruntime's (1, S, H) and (S, H) for (B, S, H)).
  Its optional outputs are the mean and inverse standard deviation of h (size-1 last axis)
  and h itself.
- SkipSimplifiedLayerNormalization: the same h, RMS-normalised over the last axis, times
  gamma. Its inv_std_var output is 1 / sqrt(mean(h^2) + epsilon); its mean output is
  refused: an RMS normalisation subtracts no mean, and onnxruntime's kernel does not write
  one.
- SimplifiedLayerNormalization: RMSNormalization (axis, epsilon 1e-5, stash_type), with
  its optional inv_std_var output over axis..end (size-1 axes kept).

And MatMulNBits, the weight-only quantized MatMul that onnxruntime's MatMulNBitsQuantizer
writes into such models (LLaMA-style ones above all): constant 2-, 4- or 8-bit weights
packed low bits first along K, in blocks of block_size with one scale (and zero point,
2**(bits - 1) where left out) per block, dequantized on the host into a float weight for one
gemm. accuracy_level only allows onnxruntime to compute in less precision than float32, so
the float32 gemm meets every level; g_idx (deprecated) and prepacked weights are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, axis_index
from . import linalg, norm, transformer, unary
from .common import optional_input, refuse_output


def _per_feature(cx: Ctx, node: Any, index: int, what: str, features: int) -> Symbol | None:
    """A 1-D gamma, beta or bias of one value per element of the last axis (None where the
    node leaves it out): onnxruntime's kernels refuse any other shape."""
    name = optional_input(node, index)
    if name is None:
        return None
    if cx.shape(name) != (features,):
        raise Invalid(f"{what} '{name}' has shape {cx.shape(name)}; it must be 1-D of the "
                      f"input's last dimension ({features},)")  # fmt: skip
    return cx.sym(name)


def _biased(cx: Ctx, node: Any, x: Symbol) -> Symbol:
    """x plus the node's optional bias (input 1)."""
    bias = _per_feature(cx, node, 1, "bias", cx.shape(x)[-1])
    return x if bias is None else cx.op("add", x, bias)


def gelu(cx: Ctx, node: Any, at: Attrs) -> list:
    return [cx.op("gelu", cx.sym(node.input[0]), approximate="none")]


def bias_gelu(cx: Ctx, node: Any, at: Attrs) -> list:
    if optional_input(node, 1) is None:
        raise Invalid("BiasGelu needs its bias input B")
    return [cx.op("gelu", _biased(cx, node, cx.sym(node.input[0])), approximate="none")]


def fast_gelu(cx: Ctx, node: Any, at: Attrs) -> list:
    return [cx.op("gelu", _biased(cx, node, cx.sym(node.input[0])), approximate="tanh")]


def quick_gelu(cx: Ctx, node: Any, at: Attrs) -> list:
    return [unary.sigmoid_gated(cx, cx.sym(node.input[0]), float(at.get("alpha", 1.702)))]


def _skip_sum(cx: Ctx, node: Any, bias_index: int) -> Symbol:
    """input + skip (+ bias): the sum the Skip*LayerNormalization ops normalise."""
    x, skip = cx.sym(node.input[0]), cx.sym(node.input[1])
    shape = cx.shape(x)
    if not shape:
        raise Invalid("the input must have at least one axis to normalise over")
    try:
        fits = np.broadcast_shapes(cx.shape(skip), shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise Invalid(f"skip of shape {cx.shape(skip)} does not match the input {shape} "
                      "(it may leave out or have size 1 in leading axes)")  # fmt: skip
    h = cx.op("add", x, skip)
    bias = _per_feature(cx, node, bias_index, "bias", shape[-1])
    return h if bias is None else cx.op("add", h, bias)


def _wants(node: Any, index: int) -> bool:
    return len(node.output) > index and bool(node.output[index])


def _inv_rms(cx: Ctx, x: Symbol, axis: int, eps: float) -> Symbol:
    """1 / sqrt(mean(x^2) + eps) over axis..end, size-1 axes kept: what the rmsnorm
    kernel scales x by, which it does not return."""
    rank = len(cx.shape(x))
    axes = list(range(axis_index(axis, rank), rank))
    ms = cx.op("mean", cx.op("mul", x, x), axes=axes, keepdims=True)
    return cx.op("rsqrt", cx.op("add", ms, cx.param(np.array(eps), like=x)))


def skip_layer_norm(cx: Ctx, node: Any, at: Attrs) -> list:
    """Outputs: output, mean, inv_std_var, input_skip_bias_sum (None where not asked for)."""
    eps = float(at.get("epsilon", 1e-12))
    h = _skip_sum(cx, node, 4)
    features = cx.shape(h)[-1]
    gamma = _per_feature(cx, node, 2, "gamma", features)
    if gamma is None:
        raise Invalid("SkipLayerNormalization needs its gamma input")
    beta = _per_feature(cx, node, 3, "beta", features)
    y = cx.op("layernorm", h, gamma, *([beta] if beta is not None else []), axis=-1, epsilon=eps)
    stats = (None, None)
    if _wants(node, 1) or _wants(node, 2):
        stats = norm.layer_norm_stats(cx, h, -1, eps)
    return [y, *stats, h]


def skip_simplified_layer_norm(cx: Ctx, node: Any, at: Attrs) -> list:
    """Outputs: output, (mean: refused), inv_std_var, input_skip_bias_sum."""
    refuse_output(node, 1, "mean", "an RMS normalisation has no mean")
    eps = float(at.get("epsilon", 1e-12))
    h = _skip_sum(cx, node, 3)
    gamma = _per_feature(cx, node, 2, "gamma", cx.shape(h)[-1])
    if gamma is None:
        raise Invalid("SkipSimplifiedLayerNormalization needs its gamma input")
    y = cx.op("rmsnorm", h, gamma, axis=-1, epsilon=eps)
    inv = _inv_rms(cx, h, -1, eps) if _wants(node, 2) else None
    return [y, None, inv, h]


def simplified_layer_norm(cx: Ctx, node: Any, at: Attrs) -> list:
    """RMSNormalization's converter for Y; inv_std_var only where the model asks for it."""
    y = transformer.rms_norm(cx, node, at)[0]
    if not _wants(node, 1):
        return [y]
    axis, eps = int(at.get("axis", -1)), float(at.get("epsilon", 1e-5))
    return [y, _inv_rms(cx, cx.sym(node.input[0]), axis, eps)]


def _unpacked(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes as their 8 // bits values each, low bits first, along the last axis."""
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)


def _nbits_weight(cx: Ctx, node: Any, at: Attrs) -> np.ndarray:
    """The (K, N) float32 weight that B, scales and zero_points encode."""
    k, n, bits, block = (int(at.get(a)) for a in ("K", "N", "bits", "block_size"))
    if bits not in (2, 4, 8):
        raise Unsupported(f"bits={bits}: onnxruntime's CPU kernel, and mnrt, take 2, 4 or 8")
    blocks = -(-k // block)
    packed = cx.const(node.input[1], "the packed weight B")
    if packed.dtype != np.uint8 or packed.shape != (n, blocks, block * bits // 8):
        raise Invalid(f"B of {packed.dtype} {packed.shape} must be uint8 of shape "
                      f"(N, ceil(K / block_size), block_size * bits / 8) = "
                      f"{(n, blocks, block * bits // 8)}")  # fmt: skip
    scales = cx.const(node.input[2], "scales").astype(np.float32)
    if scales.size != n * blocks:
        raise Invalid(f"scales of shape {scales.shape} must hold N * k_blocks = {n * blocks}")
    zp_name = optional_input(node, 3)
    if zp_name is None:
        zp = np.full((n, blocks), 1 << (bits - 1), np.float32)
    else:
        zp = cx.const(zp_name, "zero_points")
        if zp.dtype == np.uint8:
            zp = _unpacked(zp.reshape(n, -1), bits)[:, :blocks]
        if zp.size != n * blocks:
            raise Invalid(f"zero_points of shape {zp.shape} do not give one per block")
    q = _unpacked(packed, bits).astype(np.float32)
    w = (q - zp.reshape(n, blocks, 1).astype(np.float32)) * scales.reshape(n, blocks, 1)
    return np.ascontiguousarray(w.reshape(n, -1)[:, :k].T)


def matmul_nbits(cx: Ctx, node: Any, at: Attrs) -> list:
    if optional_input(node, 4) is not None:
        raise Unsupported("g_idx (deprecated: a permutation of K's quantization groups)")
    prepacked = int(at.get("weight_prepacked", 0))
    if prepacked:
        raise Unsupported(f"weight_prepacked={prepacked}: a CUDA-specific weight layout")
    at.get("accuracy_level")
    a = cx.sym(node.input[0])
    w = _nbits_weight(cx, node, at)
    if cx.shape(a)[-1] != w.shape[0]:
        raise Invalid(f"A of shape {cx.shape(a)} does not end in K={w.shape[0]}")
    y = linalg.product(cx, a, cx.param(w, like=a, stem="dequantized"))
    bias = _per_feature(cx, node, 5, "bias", w.shape[1])
    return [y if bias is None else cx.op("add", y, bias)]
