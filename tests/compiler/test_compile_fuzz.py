"""Differential testing of the compiler: random graphs, compiled with every optimisation the
options turn on, must compute what the same graph computes with none of them.

The reference is the O0 pipeline (no passes, graph order) in double precision; each
candidate is compiled in float (or at O2 mixed, see CANDIDATES) with passes (dead code,
constant folding, CSE, scale/shift folding, epilogue fusion), a scheduler (in_order,
min_memory, anneal) and an on-chip budget.
The graphs are built to give those passes work: shared subexpressions, dead branches,
scale-and-shift after a GEMM, activations after a GEMM, values read by several nodes and
also returned, reshapes and transposes between them. Every output is compared, at float32
tolerances scaled by the values' size."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnrt.compiler import GraphBuilder

UNARY = ("relu", "gelu", "sigmoid", "tanh", "neg", "abs")
BINARY = ("add", "sub", "mul", "maximum")
CANDIDATES = [
    {"option_json": "O1", "float_dtype": "float"},
    {"option_json": "O2", "float_dtype": "float", "scheduler": "min_memory"},
    {
        "option_json": "O3",
        "float_dtype": "float",
        "scheduler": "anneal",
        "sa_expected_run_iters": 200,
    },
    {"option_json": "O3", "float_dtype": "float", "sram_budget": 4096},
    # Mixed precision at O2: products this small do not pay for their casts in half, so
    # they compute in float (compiler/precision.py), to float's tolerance.
    {"option_json": "O2", "float_dtype": "mixed"},
]


@st.composite
def graphs(draw):
    """(builder, inputs): a random graph over 2-D float values of one row count."""
    rows, cols = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    b = GraphBuilder("fuzz")
    pool = [b.input("x", (rows, cols))]
    shapes = {pool[0]: (rows, cols)}
    params = iter(range(10**6))

    def param(*shape):
        return b.param(f"p{next(params)}", rng.standard_normal(shape).astype(np.float32))

    def add(sym, shape):
        pool.append(sym)
        shapes[sym] = shape
        return sym

    for _ in range(draw(st.integers(1, 8))):
        x = draw(st.sampled_from(pool))
        r, c = shapes[x]
        kind = draw(st.sampled_from(("unary", "binary", "gemm", "norm", "shape", "twice")))
        if kind == "unary":
            add(b.node(draw(st.sampled_from(UNARY)), x), (r, c))
        elif kind == "binary":
            same = [s for s in pool if shapes[s] == (r, c)]
            other = draw(st.sampled_from([*same, "row"]))
            y = param(c) if other == "row" else other
            add(b.node(draw(st.sampled_from(BINARY)), x, y), (r, c))
        elif kind == "gemm":
            n = draw(st.integers(1, 6))
            trans = draw(st.booleans())
            w = param(n, c) if trans else param(c, n)
            bias = [param(n)] if draw(st.booleans()) else []
            h = b.gemm(x, w, *bias, trans_b=trans, alpha=draw(st.sampled_from([1.0, 0.5])))
            for op in draw(st.lists(st.sampled_from(("mul", "add", "sub")), max_size=2)):
                # Scale and shift (what an imported BatchNorm becomes), per channel or not,
                # the parameter on either side.
                p = param(*draw(st.sampled_from([(n,), (1, n), (1,), (r, n)])))
                h = b.node(op, *((h, p) if draw(st.booleans()) else (p, h)))
            if draw(st.booleans()):  # an activation the GEMM can take as its epilogue
                h = b.node(draw(st.sampled_from(("relu", "gelu", "sigmoid", "tanh"))), h)
            add(h, (r, n))
        elif kind == "norm":
            if draw(st.booleans()):
                add(b.softmax(x, axis=-1), (r, c))
            else:
                add(b.layernorm(x, param(c), param(c)), (r, c))
        elif kind == "shape":
            t = b.transpose(x, perm=(1, 0))
            back = b.reshape(b.transpose(t, perm=(1, 0)), shape=(r * c,))
            add(b.reshape(back, shape=(r, c)), (r, c))
        else:  # the same node twice (one for CSE to remove) and a branch nobody reads
            op = draw(st.sampled_from(UNARY))
            first, second = b.node(op, x), b.node(op, x)
            b.node(draw(st.sampled_from(UNARY)), first)
            add(b.add(first, second), (r, c))

    outputs = {pool[-1]}
    if len(pool) > 2 and draw(st.booleans()):
        outputs.add(draw(st.sampled_from(pool[1:-1])))  # returned and read by others
    for i, sym in enumerate(sorted(outputs)):
        b.output(sym, f"out{i}")
    return b, {"x": rng.standard_normal((rows, cols)).astype(np.float32)}


@st.composite
def conv_graphs(draw):
    """(builder, inputs): convolutions with bias, per-channel scale and shift, activations
    and pooling, then a GEMM head: what the conv-side passes fold and fuse."""
    n, c, hw = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(4, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    b = GraphBuilder("convfuzz")
    shape = (n, c, hw, hw)
    h = b.input("image", shape)
    params = iter(range(10**6))

    def param(*shape):
        return b.param(f"p{next(params)}", rng.standard_normal(shape).astype(np.float32))

    for _ in range(draw(st.integers(1, 2))):
        out = draw(st.integers(1, 4))
        k = draw(st.sampled_from([1, 3] if hw >= 3 else [1]))
        bias = [param(out)] if draw(st.booleans()) else []
        pad = (k // 2,) * 4 if draw(st.booleans()) else (0, 0, 0, 0)
        h = b.conv2d(h, param(out, c, k, k), *bias, padding=pad)
        hw = hw - k + 1 + 2 * pad[0]
        for op in draw(st.lists(st.sampled_from(("mul", "add")), max_size=2)):
            h = b.node(op, h, param(*draw(st.sampled_from([(out, 1, 1), (1, out, 1, 1)]))))
        if draw(st.booleans()):
            h = b.node(draw(st.sampled_from(("relu", "sigmoid", "tanh"))), h)
        if hw >= 2 and draw(st.booleans()):
            h = b.max_pool2d(h, kernel=(2, 2))
            hw //= 2
        c = out
    h = b.reshape(b.global_avg_pool2d(h), shape=(n, c))
    b.output(b.gemm(h, param(c, 3), param(3)), "out0")
    return b, {"image": rng.standard_normal(shape).astype(np.float32)}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(graphs(), conv_graphs()))
def test_optimised_compiles_compute_what_the_unoptimised_graph_does(ctx, case):
    builder, inputs = case
    reference = ctx.compile(builder, inputs, options={"option_json": "O0", "float_dtype": "double"})
    want = {k: v.cpu() for k, v in reference(inputs).items()}
    for options in CANDIDATES:
        got = ctx.compile(builder, inputs, options=options)(inputs)
        assert got.keys() == want.keys(), options
        for name, expected in want.items():
            scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
            np.testing.assert_allclose(
                got[name].cpu(), expected, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{options}"
            )
