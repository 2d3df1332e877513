"""The compiler IR, the Python graph builder and lowering to device programs."""

from __future__ import annotations

import numpy as np
import pytest

import mnrt
from mnrt.compiler import GraphBuilder, GraphError, lower


def mlp_graph(rng):
    b = GraphBuilder("mlp")
    x = b.input("x", (8, 16), "float")
    h = x
    for i, (fan_in, fan_out) in enumerate([(16, 32), (32, 32), (32, 4)]):
        w = b.param(f"w{i}", rng.standard_normal((fan_in, fan_out)).astype(np.float32))
        bias = b.param(f"b{i}", rng.standard_normal(fan_out).astype(np.float32))
        h = b.gemm(h, w, bias)
        if i < 2:
            h = b.relu(h)
    b.output(h, "y")
    return b.build()


def test_builder_infers_shapes_and_dumps():
    g = mlp_graph(np.random.default_rng(0))
    assert g.values["y"].shape == (8, 4) and g.values["y"].dtype is mnrt.float32
    text = g.dump()
    assert text.splitlines()[0] == "graph mlp"
    assert "%y: float[8x4] @dram = gemm(%relu_" in text
    assert text.splitlines()[-1] == "  return %y"


def test_builder_reports_mistakes_where_they_are_made():
    b = GraphBuilder("bad")
    x = b.input("x", (4, 3), "float")
    w = b.input("w", (5, 2), "float")
    with pytest.raises(mnrt.ShapeError, match=r"graph 'bad' node 0 \(gemm0\).*inner dimensions"):
        b.gemm(x, w)
    with pytest.raises(mnrt.UnknownKernelError, match="known kernels are"):
        b.gemmm(x, w)
    with pytest.raises(GraphError, match="not a value"):
        b.relu("nope")
    with pytest.raises(GraphError, match="already exists"):
        b.input("x", (1,), "float")
    with pytest.raises(GraphError, match="no outputs"):
        b.build()
    assert b.graph.nodes == [] and set(b.graph.values) == {"x", "w"}  # nothing left behind


def test_lowered_mlp_runs_on_the_device_and_matches_numpy(dev, q):
    rng = np.random.default_rng(1)
    g = mlp_graph(rng)
    low = lower(g, dev)
    for name in g.params:
        q.enqueue_write_buffer(low.bindings[name], g.values[name].data)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    q.enqueue_write_buffer(low.bindings["x"], x)
    q.enqueue_program(low.program, low.bindings)
    y = q.enqueue_read_buffer(low.bindings["y"])
    h = x
    for i in range(3):
        h = h @ g.values[f"w{i}"].data + g.values[f"b{i}"].data
        if i < 2:
            h = np.maximum(h, 0)
    np.testing.assert_allclose(y, h, rtol=1e-5, atol=1e-5)


def test_dead_temporaries_share_buffers(dev):
    b = GraphBuilder("chain")
    h = b.input("x", (64,), "float")
    for _ in range(6):
        h = b.tanh(h)
    b.output(h, "y")
    low = lower(b.build(), dev)
    # x, y, and two buffers that the five temporaries alternate between.
    assert low.distinct_buffers == 4
    assert len(low.bindings) == 7


def test_a_temporary_is_not_reused_by_the_node_that_frees_it(dev):
    b = GraphBuilder("t")
    x = b.input("x", (4, 4), "float")
    t = b.exp(x)
    u = b.gemm(t, t)  # t dies here; u has t's shape but must not share its buffer
    b.output(b.neg(u), "y")
    low = lower(b.build(), dev)
    assert low.bindings[t] is not low.bindings[u]


def test_builder_output_rename_of_unknown_symbol():
    b = GraphBuilder("g")
    b.input("x", (2, 3))
    with pytest.raises(mnrt.MnrtError):  # KeyError 'nope' (builder.py:94)
        b.output("nope", "y")


def test_builder_output_same_value_under_two_names():
    b = GraphBuilder("g")
    y = b.relu(b.input("x", (2, 3)))
    b.output(y, "y")
    with pytest.raises(mnrt.MnrtError):  # KeyError 'relu_0': y was renamed away
        b.output(y, "z")


def test_builder_output_of_another_builders_value():
    b1 = GraphBuilder("a")
    y1 = b1.relu(b1.input("x", (2, 3)))
    b2 = GraphBuilder("b")
    b2.input("x", (2, 3))
    with pytest.raises(mnrt.MnrtError):  # KeyError
        b2.output(y1, "y")


def test_builder_unhashable_input_name():
    with pytest.raises(mnrt.MnrtError):  # TypeError: unhashable type: 'list'
        GraphBuilder("g").input(["x"], (2, 3))


def test_builder_list_operand():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    with pytest.raises(mnrt.MnrtError):  # TypeError: unhashable type: 'list'
        b.relu([x])


def test_builder_node_outputs_not_int():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    with pytest.raises(mnrt.MnrtError):  # TypeError (builder.py:66 range over str)
        b.node("relu", x, outputs="1")
    for count in (0, -1, 2, 2**70):  # 2**70 made names until memory ran out
        with pytest.raises(mnrt.MnrtError, match="relu has 1 output"):
            b.node("relu", x, outputs=count)
    assert b.graph.values[b.node("relu", x, outputs=1)].shape == (2, 3)


def test_builder_reserve_takes_names():
    b = GraphBuilder("g")
    for names in (None, 5, "ab", [1], b"x"):  # were TypeErrors, or "ab" reserved a and b
        with pytest.raises(mnrt.MnrtError, match="reserve takes a list of value names"):
            b.reserve(names)
    b.reserve(["relu_0"])
    x = b.input("x", (2, 3))
    assert b.relu(x) != "relu_0"


def test_builder_reshape_to_a_huge_shape_is_a_shape_error():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    with pytest.raises(mnrt.ShapeError, match="element counts must match"):
        b.reshape(x, shape=(10**20,))


def test_builder_fractional_shapes_are_refused_not_truncated():
    b = GraphBuilder("g")
    with pytest.raises(mnrt.ShapeError, match="tuple of ints"):
        b.input("x", (2.7, 3))


def test_a_graph_copy_shares_weights_and_nothing_else():
    g = mlp_graph(np.random.default_rng(0))
    before = g.dump()
    c = g.copy()
    assert c.dump() == before
    assert all(c.values[n].data is g.values[n].data for n in g.params)  # not copied
    c.values["w0"].dtype = mnrt.float64
    c.nodes[0].attrs["trans_b"] = True
    c.nodes[0].inputs.reverse()
    c.nodes.pop()
    c.inputs.append("w0")
    c.outputs.clear()
    assert g.dump() == before and g.outputs == ["y"] and g.inputs == ["x"]


def test_passes_leave_the_source_graphs_weights_as_they_were():
    # The passes share weights with the graph they were given (Graph.copy), so none may
    # change an array in place: folding and float_dtype give values new arrays.
    b = GraphBuilder("fold")
    x = b.input("x", (2, 4), "float")
    w = b.param("w", np.arange(16, dtype=np.float32).reshape(4, 4))
    scale = b.param("s", np.full((4, 4), 2.0, np.float32))
    b.output(b.gemm(x, b.mul(w, scale)), "y")
    graph = b.build()
    weights = {n: graph.values[n].data.copy() for n in graph.params}
    with mnrt.Context() as ctx:
        for float_dtype in ("half", "mixed", "double"):
            ctx.compile(graph, {"x": np.ones((2, 4), np.float32)},
                        options={"option_json": "O3", "float_dtype": float_dtype})  # fmt: skip
    assert all(np.array_equal(graph.values[n].data, weights[n]) for n in graph.params)


def test_a_param_is_copied_unless_its_owner_gives_it_away():
    from mnrt.compiler import GraphBuilder

    b = GraphBuilder("own")
    mine, theirs = np.ones(3, np.float32), np.ones(3, np.float32)
    b.param("w", mine)
    b.param("v", theirs, copy=False)  # an importer's own array: taken as it is
    mine[0] = theirs[0] = 7.0
    assert b.graph.values["w"].data[0] == 1.0 and b.graph.values["v"].data is theirs
