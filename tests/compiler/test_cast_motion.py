"""cast_motion: mixed precision's cast round trips cancel, and widenings move after the
kernels that only move values and into concatenations, always giving the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from graph_harness import run

import mnrt
from mnrt.compiler import GraphBuilder, pipeline
from mnrt.compiler.cast_motion import cancel_round_trip_casts, narrow_moves, widen_after_moving
from mnrt.compiler.chain_fusion import fuse_chains
from mnrt.compiler.node_cost import graph_cost
from mnrt.compiler.passes import apply_float_dtype, common_subexpressions


def ops(graph):
    return [n.op for n in graph.nodes]


def test_mixed_precision_round_trips_between_gemms_are_dropped_exactly(dev):
    rng = np.random.default_rng(4)
    b = GraphBuilder("chain")
    x = b.input("x", (4, 8), "float")
    h = b.gemm(x, b.param("w1", rng.standard_normal((8, 8)).astype(np.float32)))
    h = b.gemm(h, b.param("w2", rng.standard_normal((8, 8)).astype(np.float32)))
    b.output(b.tanh(h), "y")
    mixed = apply_float_dtype(b.build(), "mixed")
    # gemm half -> cast float -> cast half -> gemm: the middle pair goes.
    assert ops(mixed) == ["cast", "gemm", "cast", "cast", "gemm", "cast", "tanh"]
    lean = cancel_round_trip_casts(mixed)
    assert ops(lean) == ["cast", "gemm", "gemm", "cast", "tanh"]
    x_val = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(
        run(lean, dev, {"x": x_val})["y"], run(mixed, dev, {"x": x_val})["y"]
    )


def _dense_block(layers: int, float_head: bool):
    """DenseNet's pattern in mixed precision: each layer's half result widened, and every
    later concatenation reading the widened ones (after a float input when `float_head`)."""
    rng = np.random.default_rng(6)
    b = GraphBuilder("dense")
    x = b.input("x", (1, 4, 3, 3), "float")
    features = [b.relu(x)] if float_head else []
    for i in range(layers):
        h = b.cast(b.node("tanh", b.cast(x, to="half")), to="float") if i == 0 else None
        h = h or b.cast(b.mul(b.cast(x, to="half"), b.param(f"w{i}", rng.standard_normal(
            (1, 4, 1, 1)).astype(np.float32), dtype="half")), to="float")  # fmt: skip
        features.append(h)
        if len(features) > 1:
            b.output(b.relu(b.concat(*features, axis=1)), f"y{i}")
    return b.build()


@pytest.mark.parametrize("float_head", [False, True])
def test_concatenations_of_widened_values_concatenate_narrow_and_widen_once(dev, float_head):
    """Each widening cast read by several concatenations was a kernel of its own that no
    chain could take in (torchvision's DenseNet-121 at O3: 56 of 243 kernels); concatenated
    narrow, one widening per concatenation is left, and the results are the same bits."""
    graph = _dense_block(4, float_head)
    assert ops(graph).count("cast") == 4 + 4  # each layer: narrow its input, widen its result
    joined = narrow_moves(graph)
    widening = [n for n in joined.nodes if n.op == "cast" and n.attrs["to"] == "float"]
    concats = [n for n in joined.nodes if n.op == "concat"]
    # with a float head: the first concat(relu(x), widen(h0)) as it was (one narrow value
    # is no run to join), each later one concat(relu(x), widen(concat(h0, h1, ...)))
    assert len(widening) == (4 if float_head else 3) and len(concats) == (7 if float_head else 3)
    for node in concats:
        dtypes = {joined.values[n].dtype.name for n in node.inputs}
        assert dtypes == {"half"} or (float_head and dtypes == {"float"}), dtypes
    x = np.random.default_rng(7).standard_normal((1, 4, 3, 3)).astype(np.float32)
    want, got = run(graph, dev, {"x": x}), run(joined, dev, {"x": x})
    for name in graph.outputs:
        np.testing.assert_array_equal(got[name].view(np.uint32), want[name].view(np.uint32))


def test_a_concatenation_of_values_widened_from_different_types_is_kept():
    b = GraphBuilder("g")
    x = b.input("x", (2, 2), "double")
    half, single = b.cast(x, to="half"), b.cast(x, to="float")
    b.output(b.concat(b.cast(half, to="double"), b.cast(single, to="double"), axis=0), "y")
    graph = b.build()
    assert ops(narrow_moves(graph)) == ops(graph)


def _channel_shuffle(second_reader: bool = False):
    """Mixed precision's ShuffleNet unit: a half conv, its result widened, shuffled
    (reshape, transpose, reshape) and max pooled in float, narrowed for the next conv; a
    second reader of the widened result (an exp) when `second_reader`."""
    rng = np.random.default_rng(8)
    b = GraphBuilder("shuffle")
    x = b.input("x", (1, 4, 6, 6), "half")
    w = b.param("w", rng.standard_normal((8, 4, 1, 1)).astype(np.float32), "half")
    wide = b.cast(b.conv2d(x, w), to="float")
    h = b.reshape(wide, shape=(1, 2, 4, 6, 6))
    h = b.reshape(b.transpose(h, perm=(0, 2, 1, 3, 4)), shape=(1, 8, 6, 6))
    h = b.max_pool2d(h, kernel=(2, 2))
    v = b.param("v", rng.standard_normal((2, 8, 1, 1)).astype(np.float32), "half")
    b.output(b.conv2d(b.cast(h, to="half"), v), "y")
    if second_reader:
        b.output(b.exp(wide), "z")
    return b.build(), {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}


def test_a_widening_moves_past_what_only_moves_values_and_cancels(dev):
    graph, inputs = _channel_shuffle()
    assert ops(graph).count("cast") == 2
    lean = cancel_round_trip_casts(widen_after_moving(graph))
    # the shuffle and the pooling move half values; the widening and narrowing are gone
    assert ops(lean) == ["conv2d", "reshape", "transpose", "reshape", "max_pool2d", "conv2d"]
    assert all(lean.values[n.outputs[0]].dtype.name == "half" for n in lean.nodes)
    assert run(lean, dev, inputs)["y"].tobytes() == run(graph, dev, inputs)["y"].tobytes()
    assert graph_cost(lean).time_s < graph_cost(graph).time_s


def test_a_widening_a_rounding_back_reads_too_moves_past_the_pooling(dev):
    """An Inception block's input, a half conv's result widened, is read by the block's
    max pooling and, rounded back to half, by its convs: the rounding cancels anyway, so
    the widening moves past the pooling too, which then pools half values between two
    half convs with no cast around it."""
    rng = np.random.default_rng(15)
    b = GraphBuilder("block")
    x = b.input("x", (1, 4, 6, 6), "half")
    w = b.param("w", rng.standard_normal((8, 4, 1, 1)).astype(np.float32), "half")
    wide = b.cast(b.conv2d(x, w), to="float")
    v = b.param("v", rng.standard_normal((4, 8, 1, 1)).astype(np.float32), "half")
    pooled = b.cast(b.max_pool2d(wide, kernel=(3, 3), padding=(1, 1, 1, 1)), to="half")
    b.output(b.conv2d(pooled, v), "y")
    b.output(b.conv2d(b.cast(wide, to="half"), v), "z")
    graph = b.build()
    lean = cancel_round_trip_casts(widen_after_moving(graph))
    assert "cast" not in ops(lean)
    inputs = {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    want, got = run(graph, dev, inputs), run(lean, dev, inputs)
    assert all(got[k].tobytes() == want[k].tobytes() for k in ("y", "z"))


def test_a_widening_whose_rounding_back_is_a_graph_output_stays_where_it_is():
    """cancel_round_trip_casts keeps a rounding that names a graph output, so the widening
    it reads would stay beside the one moved after the pooling: a cast kernel more."""
    rng = np.random.default_rng(16)
    b = GraphBuilder("block")
    x = b.input("x", (1, 4, 6, 6), "half")
    w = b.param("w", rng.standard_normal((8, 4, 1, 1)).astype(np.float32), "half")
    wide = b.cast(b.conv2d(x, w), to="float")
    b.output(b.max_pool2d(wide, kernel=(3, 3), padding=(1, 1, 1, 1)), "y")
    b.output(b.cast(wide, to="half"), "z")
    graph = b.build()
    assert ops(widen_after_moving(graph)) == ops(graph)


def test_a_widening_another_kernel_reads_stays_where_it_is():
    graph, _ = _channel_shuffle(second_reader=True)
    assert ops(widen_after_moving(graph)) == ops(graph)


def _shuffle_units(units: int):
    """torchvision's ShuffleNet v2 units in mixed precision: the channels split in halves
    (two slices), one passed on, the other through a half conv (narrowed for it, its
    result widened), the two concatenated and shuffled (reshape, transpose, reshape)."""
    rng = np.random.default_rng(11)
    b = GraphBuilder("units")
    x = b.input("x", (1, 4, 6, 6), "half")
    w = b.param("w", rng.standard_normal((8, 4, 1, 1)).astype(np.float32), "half")
    h = b.cast(b.conv2d(x, w), to="float")
    for i in range(units):
        keep = b.slice(h, starts=(0,), ends=(4,), axes=(1,))
        side = b.cast(b.slice(h, starts=(4,), ends=(8,), axes=(1,)), to="half")
        v = b.param(f"v{i}", rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "half")
        h = b.concat(keep, b.cast(b.conv2d(side, v, epilogue="relu"), to="float"), axis=1)
        h = b.reshape(b.transpose(b.reshape(h, shape=(1, 2, 4, 6, 6)), perm=(0, 2, 1, 3, 4)),
                      shape=(1, 8, 6, 6))  # fmt: skip
    b.output(h, "y")
    return b.build(), {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}


def test_a_widening_several_moves_read_moves_after_each_unit_after_unit(dev):
    """A widening read by two slices moves after both, and the widened halves meet again in
    the next concatenation, which concatenates them narrow: narrow_moves does both in one
    sweep, so the whole stage moves half values and one widening is left, of the stage's
    float result."""
    graph, inputs = _shuffle_units(3)
    lean = cancel_round_trip_casts(narrow_moves(graph))
    assert [n.op for n in lean.nodes if n.op in ("cast", "conv2d")] == ["conv2d"] * 4 + ["cast"]
    assert lean.nodes[-1].op == "cast" and lean.nodes[-1].outputs == ["y"]
    assert all(lean.values[n.outputs[0]].dtype.name == "half" for n in lean.nodes[:-1])
    assert run(lean, dev, inputs)["y"].tobytes() == run(graph, dev, inputs)["y"].tobytes()
    assert graph_cost(lean).time_s < graph_cost(graph).time_s
    # one pass of widen_after_moving alone reaches no further than the first concatenation
    once = cancel_round_trip_casts(widen_after_moving(graph))
    assert [n.op for n in once.nodes].count("cast") > 1


def test_narrow_moves_leaves_a_widening_before_a_max_pooling():
    """O3's chains take a pooling's casts in as steps; moving them measured slower."""
    graph, _ = _channel_shuffle()
    lean = cancel_round_trip_casts(narrow_moves(graph))
    assert ops(lean) == [
        "conv2d", "reshape", "transpose", "reshape", "cast", "max_pool2d", "cast", "conv2d"
    ]  # fmt: skip


def test_o3_keeps_a_shufflenet_stage_narrow_in_fewer_kernels_with_the_same_bits(monkeypatch):
    """At O3 mixed, each slice that fed a conv was a chain rounding the widened shuffle back
    to half; narrow, the slices are views that run nothing (torchvision's ShuffleNet v2: 88
    kernels, 183.4 us modelled; now 75, 157.5 us)."""
    b = GraphBuilder("stage")
    rng = np.random.default_rng(12)
    w = b.param("w", rng.standard_normal((8, 3, 1, 1)).astype(np.float32))
    h = b.conv2d(b.input("x", (1, 3, 6, 6), "float"), w, epilogue="relu")
    for i in range(3):
        keep = b.slice(h, starts=(0,), ends=(4,), axes=(1,))
        side = b.slice(h, starts=(4,), ends=(8,), axes=(1,))
        v = b.param(f"v{i}", rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
        h = b.concat(keep, b.conv2d(side, v, epilogue="relu"), axis=1)
        h = b.reshape(b.transpose(b.reshape(h, shape=(1, 2, 4, 6, 6)), perm=(0, 2, 1, 3, 4)),
                      shape=(1, 8, 6, 6))  # fmt: skip
    b.output(b.global_avg_pool2d(h), "y")
    graph, inputs = b.build(), {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    before = (common_subexpressions, cancel_round_trip_casts, fuse_chains)  # no narrow_moves
    with mnrt.Context() as ctx:
        now = ctx.compile(graph, inputs, options={"option_json": "O3", "float_dtype": "mixed"})
        monkeypatch.setitem(pipeline.AFTER_FLOAT_DTYPE, "O3", before)
        was = ctx.compile(graph, inputs, options={"option_json": "O3", "float_dtype": "mixed"})
        kernels = {k: len(c.lowered.program.kernels) for k, c in (("now", now), ("was", was))}
        assert kernels["now"] < kernels["was"]
        time = {k: graph_cost(c.graph).time_s for k, c in (("now", now), ("was", was))}
        assert time["now"] < time["was"]
        assert now(inputs)["y"].cpu().tobytes() == was(inputs)["y"].cpu().tobytes()


def test_a_narrowing_then_widening_pair_is_kept():
    """float -> half -> float loses precision: it is a rounding, not a round trip."""
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float")
    b.output(b.cast(b.cast(x, to="half"), to="float"), "y")
    assert ops(cancel_round_trip_casts(b.build())) == ["cast", "cast"]
