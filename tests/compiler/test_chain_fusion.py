"""fuse_matrix_chains (O3, O4): a gemm or conv2d and the pointwise kernels after it are
one chain headed by the matrix kernel, computing the same bits in one launch, priced
lower, and only where nothing else reads the product and the reader runs next."""

from __future__ import annotations

import json

import numpy as np
import pytest
from graph_harness import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder, pipeline
from mnrt.compiler.chain_fusion import fuse_matrix_chains
from mnrt.compiler.map_graph import explain, map_graph
from mnrt.compiler.node_cost import graph_cost
from mnrt.compiler.options import resolve
from mnrt.compiler.placement import DRAM, ON_CHIP
from mnrt.device.mapping import Mapping


def _residual_block(
    seed: int = 0,
    also_out: bool = False,
    between: bool = False,
    skip_first: bool = False,
    projected: bool = False,
    unrelated: bool = False,
) -> GraphBuilder:
    """A ResNet basic block: conv, ReLU, conv, the skip connection added (written first, as
    torchvision's RegNet writes `x + f(x)`, where `skip_first`; a conv of x, computed
    after the block's, where `projected`), ReLU."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("block")
    x = b.input("x", (1, 8, 8, 8), "float")

    def conv(h, name):
        w = b.param(f"{name}_w", (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32))
        bias = b.param(f"{name}_b", rng.standard_normal(8).astype(np.float32))
        return b.conv2d(h, w, bias, padding=(1, 1, 1, 1))

    h = conv(b.relu(conv(x, "c1")), "c2")
    projection = conv(x, "proj") if projected else x
    skip = b.neg(x) if between else projection  # a kernel between the product and its reader
    if unrelated:  # a kernel between them that the reader does not need
        b.output(b.neg(x), "z")
    b.output(b.relu(b.add(skip, h) if skip_first else b.add(h, skip)), "y")
    if also_out:
        b.output(h, "h")
    return b


def _inputs() -> dict:
    return {"x": np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype(np.float32)}


def _compile(ctx, model, float_dtype: str, fuse: bool, monkeypatch):
    with monkeypatch.context() as m:
        if not fuse:
            m.setattr(pipeline, "AFTER_LAYOUT", {})
        opts = {"option_json": "O3", "float_dtype": float_dtype}
        return ctx.compile(model, _inputs(), options=opts)


def _heads(graph) -> list[list[str]]:
    """The steps of every chain holding a matrix kernel."""
    steps = [
        [s["op"] for s in json.loads(n.attrs["steps"])] for n in graph.nodes if n.op == "chain"
    ]
    return [ops for ops in steps if {"gemm", "conv2d"} & set(ops)]


@pytest.mark.parametrize("block", ["identity", "skip_first", "projected"])
@pytest.mark.parametrize("float_dtype", ["float", "mixed"])
def test_a_conv_takes_the_residual_add_and_relu_as_its_epilogue(
    float_dtype, block, monkeypatch, tmp_path
):
    """The chain of the add and ReLU may have taken the skip as its x (written first; or,
    at mixed, the block's half result, which its first step widens, where the projection
    runs next): the conv's result, its operand, becomes its x, and the skip an operand
    widened on load."""
    ctx = mnrt.Context()
    model = _residual_block(**({block: True} if block != "identity" else {}))
    plain = _compile(ctx, model, float_dtype, False, monkeypatch)
    fused = _compile(ctx, model, float_dtype, True, monkeypatch)
    try:
        epilogue = ["add", "relu"] if float_dtype == "float" else ["cast", "add", "relu"]
        assert ["conv2d", *epilogue] in _heads(fused.graph)
        assert len(fused.graph.nodes) < len(plain.graph.nodes)
        assert graph_cost(fused.graph).time_s < graph_cost(plain.graph).time_s
        assert graph_cost(fused.graph).energy_j < graph_cost(plain.graph).energy_j
        want, got = plain(_inputs())["y"].cpu(), fused(_inputs())["y"].cpu()
        assert got.tobytes() == want.tobytes()
        # `mnrt compile --explain` still explains the conv's mapping, as the chain's head
        explained = explain(fused.graph, fused.options["mapping_effort"])
        held = explained.count(" (chain with conv2d):")
        assert explained.count(" (conv2d):") + held == 2 + (block == "projected")
        assert held >= 1
        phases = [name for name, _ in pipeline.steps(resolve({"option_json": "O3"}))]
        assert phases.index("layout") < phases.index("fuse_matrix_chains")
        # the binary replays and every kernel, the headed chain included, matches its print
        fused.save_binary(tmp_path / "block.mnlb")
        report = mnrt.replay(tmp_path / "block.mnlb", rtol=0.0, atol=0.0, locate=True)
        assert report.passed and report.locate.divergent == 0
    finally:
        plain.close()
        fused.close()


def test_a_product_read_twice_or_by_a_kernel_that_needs_a_later_value_keeps_its_launch():
    for kwargs in ({"also_out": True}, {"between": True}):
        g = map_graph(_residual_block(**kwargs).build(), 1)
        if "between" in kwargs:  # the builder's order: conv, neg, add (of the neg)
            assert [n.op for n in g.nodes][-3:] == ["neg", "add", "relu"]
        assert _heads(fuse_matrix_chains(g)) == [["conv2d", "relu"]]  # the first conv's


def test_a_reader_that_runs_later_joins_the_product_where_it_was_made(dev):
    g = map_graph(_residual_block(unrelated=True).build(), 1)
    assert [n.op for n in g.nodes][-4:] == ["conv2d", "neg", "add", "relu"]
    fused = fuse_matrix_chains(g)
    assert [n.op for n in fused.nodes][-3:] == ["chain", "neg", "relu"]
    assert _heads(fused)[-1] == ["conv2d", "add"]
    want, got = run(g, dev, _inputs()), run(fused, dev, _inputs())
    assert all(got[n].tobytes() == want[n].tobytes() for n in g.outputs)


def test_a_matrix_kernel_without_a_mapping_is_left_as_it_is():
    g = _residual_block().build()  # not mapped (the pass runs after the mapping step)
    assert _heads(fuse_matrix_chains(g)) == []
    assert _heads(fuse_matrix_chains(map_graph(g, 1))) == [["conv2d", "relu"], ["conv2d", "add"]]


@pytest.mark.parametrize(
    ("product", "result", "moved"),
    [("dram", "dram", True), ("dram", "lm", False), ("lm", "lm", True), ("lm", "dram", True)],
)
def test_a_reader_moves_up_only_where_it_keeps_no_more_on_chip(product, result, moved):
    """Run at the product's place, the reader's result lives on chip from there on: that
    is allowed where it is not on chip, or where the product it replaces was and is no
    smaller (both are float[1x8x8x8] here)."""
    g = map_graph(_residual_block(unrelated=True).build(), 1)
    conv, _, add = g.nodes[-4:-1]
    g.values[conv.outputs[0]].location = ON_CHIP if product == "lm" else DRAM
    g.values[add.outputs[0]].location = ON_CHIP if result == "lm" else DRAM
    heads = _heads(fuse_matrix_chains(g))
    assert (["conv2d", "add"] in heads) is moved


@st.composite
def _products_and_epilogues(draw):
    """A conv2d or gemm with a random run of what a prologue may hold before it (unary
    functions, arithmetic with a parameter or with a gate computed from a second input)
    and of what an epilogue may hold after it (unary functions, arithmetic with a parameter,
    per channel or whole, or with a second input, a reshape or transpose)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    b = GraphBuilder("epilogue")
    conv = draw(st.booleans())
    shape = (1, 4, 5, 5) if conv else (3, 6)
    x = b.input("x", shape, "float")
    skip_shape = (1, 8, 5, 5) if conv else (3, 8)
    skip = b.input("skip", skip_shape, "float")
    for i in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(("unary", "param", "gate")))
        if kind == "unary":
            x = b.node(draw(st.sampled_from(("relu", "tanh", "neg"))), x)
        elif kind == "param":
            p = b.param(f"q{i}", rng.standard_normal(shape).astype(np.float32))
            x = b.node(draw(st.sampled_from(("add", "mul"))), *((x, p) if i % 2 else (p, x)))
        else:  # squeeze-excite: a gate from a second input scales x
            gate = b.sigmoid(b.input(f"g{i}", (1, 4, 1, 1) if conv else (1, 6), "float"))
            x = b.node("mul", *((gate, x) if draw(st.booleans()) else (x, gate)))
    if conv:
        w = b.param("w", (rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32))
        h = b.conv2d(x, w, padding=(1, 1, 1, 1))
    else:
        h = b.gemm(x, b.param("w", rng.standard_normal((6, 8)).astype(np.float32)))
    out_shape = (1, 8, 5, 5) if conv else (3, 8)
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("unary", "param", "skip", "rearrange")))
        if kind == "unary":
            h = b.node(draw(st.sampled_from(("relu", "tanh", "sigmoid", "neg", "gelu"))), h)
        elif kind == "param":
            per = (1, 8, 1, 1) if conv and draw(st.booleans()) else out_shape
            p = b.param(f"p{i}", rng.standard_normal(per).astype(np.float32))
            op = draw(st.sampled_from(("add", "mul", "sub", "maximum")))
            h = b.node(op, *((h, p) if draw(st.booleans()) else (p, h)))
        elif kind == "skip" and skip is not None and out_shape == skip_shape:
            h = b.node("add", *((h, skip) if draw(st.booleans()) else (skip, h)))
            skip = None  # one input, read once
        elif kind == "rearrange" and len(out_shape) == 2:
            h = b.transpose(h)
            out_shape = out_shape[::-1]
    b.output(h, "y")
    if skip is not None:
        b.output(b.neg(skip), "z")
    gates = [(n, (1, 4, 1, 1) if conv else (1, 6)) for n in ("g0", "g1") if b.taken(n)]
    values = {
        n: rng.standard_normal(s).astype(np.float32)
        for n, s in (("x", shape), ("skip", skip_shape), *gates)
    }
    return b, values


@given(_products_and_epilogues(), st.sampled_from(["float", "mixed"]))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_epilogue_computes_the_same_bits_as_the_kernels_it_replaced(case, float_dtype):
    model, inputs = case
    with mnrt.Context() as ctx, pytest.MonkeyPatch.context() as m:
        opts = {"option_json": "O3", "float_dtype": float_dtype}
        fused = ctx.compile(model, inputs, options=opts)
        m.setattr(pipeline, "AFTER_LAYOUT", {})
        plain = ctx.compile(model, inputs, options=opts)
        assert len(fused.graph.nodes) <= len(plain.graph.nodes)
        assert graph_cost(fused.graph).time_s <= graph_cost(plain.graph).time_s
        want, got = plain(inputs), fused(inputs)
        for name in plain.graph.outputs:
            assert got[name].cpu().tobytes() == want[name].cpu().tobytes()


@pytest.mark.parametrize("float_dtype", ["float", "mixed"])
def test_a_squeeze_excite_scaling_becomes_the_projection_s_prologue(
    float_dtype, monkeypatch, tmp_path
):
    """x scaled by a gate from its pooled channels, then a 1x1 projection: the scaling is
    applied as the projection loads x, the same bits in fewer launches."""
    rng = np.random.default_rng(4)
    b = GraphBuilder("se")
    x = b.input("x", (1, 8, 6, 6), "float")
    w1 = b.param("w1", (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32))
    gate = b.sigmoid(b.conv2d(b.global_avg_pool2d(x), w1))
    w2 = b.param("w2", (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32))
    b.output(b.conv2d(b.mul(x, gate), w2), "y")
    inputs = {"x": rng.standard_normal((1, 8, 6, 6)).astype(np.float32)}
    with mnrt.Context() as ctx:
        opts = {"option_json": "O3", "float_dtype": float_dtype}
        fused = ctx.compile(b, inputs, options=opts)
        with monkeypatch.context() as m:
            m.setattr(pipeline, "AFTER_LAYOUT", {})
            plain = ctx.compile(b, inputs, options=opts)
        held = [ops for ops in _heads(fused.graph) if "mul" in ops]
        assert len(held) == 1 and held[0].index("mul") < held[0].index("conv2d")
        assert len(fused.graph.nodes) < len(plain.graph.nodes)
        assert graph_cost(fused.graph).time_s < graph_cost(plain.graph).time_s
        assert fused(inputs)["y"].cpu().tobytes() == plain(inputs)["y"].cpu().tobytes()
        fused.save_binary(tmp_path / "se.mnlb")
    report = mnrt.replay(tmp_path / "se.mnlb", rtol=0.0, atol=0.0, locate=True)
    assert report.passed and report.locate.divergent == 0


@pytest.mark.parametrize(("where", "fused"), [("dram", True), ("lm", False)])
def test_a_prologue_that_ran_earlier_joins_only_where_it_keeps_nothing_longer_on_chip(where, fused):
    """Run at the conv's place, the scaling reads x later than it did: allowed where x is
    not kept on chip, or is read there anyway."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("late")
    x = b.input("x", (1, 4, 5, 5), "float")
    scaled = b.mul(x, b.param("s", rng.standard_normal((1, 4, 1, 1)).astype(np.float32)))
    b.output(b.neg(b.input("z", (3,), "float")), "nz")  # runs between the two
    w = b.param("w", rng.standard_normal((2, 4, 1, 1)).astype(np.float32))
    b.output(b.conv2d(scaled, w), "y")
    g = map_graph(b.build(), 1)
    assert [n.op for n in g.nodes] == ["mul", "neg", "conv2d"]
    g.values["x"].location = ON_CHIP if where == "lm" else DRAM
    assert (["mul", "conv2d"] in _heads(fuse_matrix_chains(g))) is fused


def test_explain_names_the_mapping_a_chain_runs_where_the_mapper_would_now_pick_another():
    """A 1x1 conv mapped alone (its product to DRAM), then holding its bias and ReLU as a
    chain (its product on chip): weighed as the chain holds it, the mapper prefers another
    mapping. `--explain` names the one the binary runs, and the other as what it is; an
    explanation never calls "chosen" a mapping the chain does not carry."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("pointwise")
    x = b.input("x", (1, 16, 28, 28), "float")
    w = b.param("w", (rng.standard_normal((16, 16, 1, 1)) * 0.1).astype(np.float32))
    y = b.add(b.conv2d(x, w), b.param("s", rng.standard_normal((1, 16, 1, 1)).astype(np.float32)))
    b.output(b.relu(y), "y")
    inputs = {"x": rng.standard_normal((1, 16, 28, 28)).astype(np.float32)}
    with mnrt.Context() as ctx:
        compiled = ctx.compile(b, inputs, options={"option_json": "O3", "float_dtype": "mixed"})
        (node,) = compiled.graph.nodes
        assert node.op == "chain"
        explained = explain(compiled.graph, compiled.options["mapping_effort"])
    runs = Mapping.from_attr(node.attrs["mapping"])
    assert f"runs: {runs} (chosen for the conv2d alone, before the chain took it)" in explained
    preferred = explained.split("with its product on chip: ")[1].split(":")[0]
    assert preferred != str(runs) and "chosen:" not in explained
