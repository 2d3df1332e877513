"""Models written with GraphBuilder: the demo's, and the compiler's own test models. Each
returns (builder, example inputs); weights come from a seeded generator."""

from __future__ import annotations

import math

import numpy as np

from .builder import GraphBuilder


def _weight(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = math.prod(shape[1:]) if len(shape) > 2 else shape[0]
    return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)


def mlp(seed: int = 0, batch: int = 32) -> tuple[GraphBuilder, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    b = GraphBuilder("mlp")
    h = b.input("x", (batch, 64))
    for i, (fan_in, fan_out) in enumerate([(64, 128), (128, 128), (128, 10)]):
        h = b.gemm(h, b.param(f"fc{i}.w", _weight(rng, fan_in, fan_out)),
                   b.param(f"fc{i}.b", np.zeros(fan_out, np.float32)))  # fmt: skip
        if i < 2:
            h = b.gelu(h)
    b.output(b.softmax(h), "probs")
    return b, {"x": rng.standard_normal((batch, 64)).astype(np.float32)}


def cnn(
    seed: int = 0, batch: int = 2, size: int = 32
) -> tuple[GraphBuilder, dict[str, np.ndarray]]:
    """Two conv-relu-maxpool stages, global average pooling and a classifier, on
    `size` x `size` RGB images."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("cnn")
    h = b.input("image", (batch, 3, size, size))
    for i, (cin, cout) in enumerate([(3, 16), (16, 32)]):
        w = b.param(f"conv{i}.w", _weight(rng, cout, cin, 3, 3))
        bias = b.param(f"conv{i}.b", np.zeros(cout, np.float32))
        h = b.relu(b.conv2d(h, w, bias, padding=(1, 1, 1, 1)))
        h = b.max_pool2d(h, kernel=(2, 2))
    h = b.reshape(b.global_avg_pool2d(h), shape=(batch, 32))
    h = b.gemm(
        h, b.param("head.w", _weight(rng, 32, 10)), b.param("head.b", np.zeros(10, np.float32))
    )
    b.output(b.softmax(h), "probs")
    return b, {"image": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


def _encoder_layer(b: GraphBuilder, x: str, rng: np.random.Generator, seq: int, dim: int,
                   heads: int, prefix: str = "") -> str:  # fmt: skip
    """A pre-norm encoder layer on x (seq, dim): multi-head self-attention and a GELU MLP,
    each with a residual connection and LayerNorm; parameters named `prefix` + their role."""
    dh = dim // heads

    def norm(h, name):
        return b.layernorm(h, b.param(f"{prefix}{name}.g", np.ones(dim, np.float32)),
                           b.param(f"{prefix}{name}.b", np.zeros(dim, np.float32)))  # fmt: skip

    def heads_of(h):  # (seq, dim) -> (heads, seq, dh)
        return b.transpose(b.reshape(h, shape=(seq, heads, dh)), perm=(1, 0, 2))

    h = norm(x, "ln1")
    q, k, v = (
        heads_of(b.gemm(h, b.param(f"{prefix}attn.{n}", _weight(rng, dim, dim)))) for n in "qkv"
    )
    scores = b.gemm(q, k, trans_b=True, alpha=1 / math.sqrt(dh))
    ctx = b.gemm(b.softmax(scores), v)
    ctx = b.reshape(b.transpose(ctx, perm=(1, 0, 2)), shape=(seq, dim))
    x = b.add(x, b.gemm(ctx, b.param(f"{prefix}attn.o", _weight(rng, dim, dim))))
    h = norm(x, "ln2")
    h = b.gelu(b.gemm(h, b.param(f"{prefix}mlp.w1", _weight(rng, dim, 4 * dim)),
                      b.param(f"{prefix}mlp.b1", np.zeros(4 * dim, np.float32))))  # fmt: skip
    h = b.gemm(
        h,
        b.param(f"{prefix}mlp.w2", _weight(rng, 4 * dim, dim)),
        b.param(f"{prefix}mlp.b2", np.zeros(dim, np.float32)),
    )
    return b.add(x, h)


def transformer_block(
    seed: int = 0, seq: int = 64, dim: int = 128, heads: int = 4
) -> tuple[GraphBuilder, dict[str, np.ndarray]]:
    """A pre-norm encoder block: multi-head self-attention and a GELU MLP, each with a
    residual connection and LayerNorm."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("transformer_block")
    x = b.input("x", (seq, dim))
    b.output(_encoder_layer(b, x, rng, seq, dim, heads), "y")
    return b, {"x": rng.standard_normal((seq, dim)).astype(np.float32)}


def encoder_stack(
    seed: int = 0, layers: int = 8, seq: int = 64, dim: int = 128, heads: int = 4
) -> tuple[GraphBuilder, dict[str, np.ndarray]]:
    """`layers` encoder layers (transformer_block's) in a row, then a final LayerNorm; each
    layer's nodes are in scope `layer<i>` (what a stage_assignment names)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("encoder_stack")
    h = b.input("x", (seq, dim))
    for i in range(layers):
        with b.scope(f"layer{i}"):
            h = _encoder_layer(b, h, rng, seq, dim, heads, prefix=f"layer{i}.")
    h = b.layernorm(h, b.param("ln_f.g", np.ones(dim, np.float32)),
                    b.param("ln_f.b", np.zeros(dim, np.float32)))  # fmt: skip
    b.output(h, "y")
    return b, {"x": rng.standard_normal((seq, dim)).astype(np.float32)}


def deep_mlp(
    seed: int = 0, layers: int = 16, batch: int = 64, width: int = 256
) -> tuple[GraphBuilder, dict[str, np.ndarray]]:
    """`layers` GEMM layers of one width, each in scope `layer<i>`: GELU between them and a
    softmax over the last one's logits, as a classifier puts it (no activation clips logits)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("deep_mlp")
    h = b.input("x", (batch, width))
    for i in range(layers):
        with b.scope(f"layer{i}"):
            h = b.gemm(h, b.param(f"layer{i}.w", _weight(rng, width, width)),
                       b.param(f"layer{i}.b", np.zeros(width, np.float32)))  # fmt: skip
            h = b.gelu(h) if i < layers - 1 else b.softmax(h)
    b.output(h, "probs")
    return b, {"x": rng.standard_normal((batch, width)).astype(np.float32)}


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer_block}
