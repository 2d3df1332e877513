"""Values that share a buffer (compiler/views.py): a concatenation whose parts are written
in place and a reshape of the buffer it reshapes run no kernel, and give the same bits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from graph_harness import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder, pipeline, serialize
from mnrt.compiler.node_cost import graph_cost
from mnrt.compiler.views import elide_copies

RNG = np.random.default_rng(7)


def _conv(b, x, cin, cout, name):
    w = b.param(name, (RNG.standard_normal((cout, cin, 3, 3)) / 6).astype(np.float32))
    return b.relu(b.conv2d(x, w, padding=(1, 1, 1, 1)))


def _dense_block(batch: int = 1, pairwise: bool = True) -> tuple[GraphBuilder, dict]:
    """Three layers of a DenseNet block: each conv reads the concatenation of every
    feature map before it (pairwise: concat(previous, new), as the ONNX zoo's DenseNet
    writes it; else concat of all of them, as torchvision's export does)."""
    b = GraphBuilder("block")
    x = b.input("x", (batch, 4, 6, 6), "float")
    feats = [_conv(b, x, 4, 4, "w0")]
    whole = feats[0]
    for i in range(1, 4):
        new = _conv(b, whole, 4 * i, 4, f"w{i}")
        feats.append(new)
        whole = b.concat(whole, new, axis=1) if pairwise else b.concat(*feats, axis=1)
    b.output(b.global_avg_pool2d(whole), "y")
    return b, {"x": RNG.standard_normal((batch, 4, 6, 6)).astype(np.float32)}


def _compile(b, inputs, preset="O1", elide=True, monkeypatch=None):
    if not elide:
        monkeypatch.setitem(pipeline.AFTER_LAYOUT, preset, ())
    with mnrt.Context() as ctx:
        options = {"option_json": preset, "float_dtype": "float"}
        compiled = ctx.compile(b, inputs, options=options)
        ran = {k: v.cpu() for k, v in compiled(inputs).items()}
        kernels = [k.op for k in compiled.lowered.program.kernels]
        return compiled.graph, kernels, ran


@pytest.mark.parametrize("pairwise", [True, False])
@pytest.mark.parametrize("preset", ["O1", "O2"])
def test_a_dense_block_grows_one_buffer(preset, pairwise, monkeypatch):
    b, inputs = _dense_block(pairwise=pairwise)
    graph, kernels, ran = _compile(b, inputs, preset)
    assert "concat" not in kernels and kernels.count("conv2d") == 4
    # every feature map lies in the last concatenation's buffer, one after another
    concats = [n for n in graph.nodes if n.op == "concat"]
    last = concats[-1].outputs[0]
    assert {graph.root_of(v)[0] for n in concats for v in (*n.inputs, *n.outputs)} == {last}
    features = [concats[0].inputs[0], *(n.inputs[-1] for n in concats)]
    assert [graph.root_of(v)[1] for v in features] == [0, 144, 288, 432]
    _, copied, want = _compile(b, inputs, preset, elide=False, monkeypatch=monkeypatch)
    assert copied.count("concat") == 3
    np.testing.assert_array_equal(ran["y"], want["y"])


def test_eliding_lowers_the_modelled_time(monkeypatch):
    b, inputs = _dense_block()
    graph, _, _ = _compile(b, inputs)
    before, _, _ = _compile(b, inputs, elide=False, monkeypatch=monkeypatch)
    assert graph_cost(graph).time_s < graph_cost(before).time_s


def test_parts_that_are_no_runs_of_the_whole_are_copied():
    b, inputs = _dense_block(batch=2)  # a channel of image 0, then image 1's: strided
    _, kernels, _ = _compile(b, inputs)
    assert kernels.count("concat") == 3


def test_a_part_the_host_writes_keeps_its_buffer():
    b = GraphBuilder("g")
    x = b.input("x", (1, 4, 6, 6), "float")
    b.output(b.relu(b.concat(x, _conv(b, x, 4, 4, "w"), axis=1)), "y")
    inputs = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    _, kernels, ran = _compile(b, inputs)
    assert "concat" in kernels
    assert ran["y"].shape == (1, 8, 6, 6)


def test_a_concatenation_repeating_a_part_is_copied_into_the_buffer_it_shares(dev):
    """y = concat(r, concat(r, r)): r and the inner concatenation lie in y's buffer, where
    the inner one must still copy r twice (its operands share a buffer, not its layout)."""
    b = GraphBuilder("g")
    x = b.input("x", (1, 2, 4, 4), "float")
    r = b.relu(x)
    b.output(b.concat(r, b.concat(r, r, axis=1), axis=1), "y")
    graph = b.build()
    elided = elide_copies(graph)
    inner, outer = (n for n in elided.nodes if n.op == "concat")
    assert elided.root_of(inner.outputs[0]) == ("y", 32) and elided.root_of(r) == ("y", 0)
    assert elided.elided(outer) and not elided.elided(inner)
    inputs = {"x": RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)}
    assert run(elided, dev, inputs)["y"].tobytes() == run(graph, dev, inputs)["y"].tobytes()


def test_a_reshape_is_the_buffer_it_reshapes(monkeypatch):
    b = GraphBuilder("g")
    x = b.input("x", (1, 4, 6, 6), "float")
    h = b.reshape(_conv(b, x, 4, 4, "w"), shape=(1, 144))
    b.output(b.reshape(b.softmax(h), shape=(1, 4, 6, 6)), "y")  # an output keeps its own
    inputs = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    graph, kernels, ran = _compile(b, inputs)
    assert "reshape" not in kernels
    (out,) = graph.outputs
    softmax = next(n for n in graph.nodes if n.op == "softmax").outputs[0]
    assert graph.root_of(softmax) == (out, 0)  # written straight into the output
    _, copied, want = _compile(b, inputs, elide=False, monkeypatch=monkeypatch)
    assert copied.count("reshape") == 2
    np.testing.assert_array_equal(ran["y"], want["y"])


def test_a_graph_keeps_its_views_through_a_folder_and_refuses_a_bad_one(tmp_path):
    b, inputs = _dense_block()
    graph, _, _ = _compile(b, inputs)
    serialize.save(graph, tmp_path, "g")
    again = serialize.load(tmp_path, "g")
    views = {n: v.view for n, v in graph.values.items() if v.view is not None}
    assert len(views) == 6 and {n: v.view for n, v in again.values.items() if v.view} == views
    doc = json.loads((tmp_path / "g.json").read_text())
    name = next(iter(views))
    doc["values"][name]["view"][1] = 10**6  # past the end of its buffer
    (tmp_path / "g.json").write_text(json.dumps(doc))
    with pytest.raises(mnrt.InvalidArgumentError, match=f"'{name}' cannot be part of value"):
        serialize.load(tmp_path, "g")


def test_a_compiled_binary_with_views_replays_and_locates(tmp_path):
    b, inputs = _dense_block()
    with mnrt.Context() as ctx:
        compiled = ctx.compile(b, inputs, options={"option_json": "O1"})
        compiled.save_binary(tmp_path / "block.mnlb")
    report = mnrt.replay(tmp_path / "block.mnlb", locate=True)
    assert report.verified and report.locate.first_divergent is None
    assert report.locate.compared == 9  # 4 convs, 4 relus, the pooling: no concatenation


def test_the_codegen_dir_tells_of_the_shared_values(tmp_path):
    b, inputs = _dense_block()
    with mnrt.Context() as ctx:
        compiled = ctx.compile(b, inputs, codegen_dir=tmp_path, options={"option_json": "O1"})
    graph = compiled.graph
    shared = {n for n, v in graph.values.items() if v.view is not None}
    shared |= {v.view[0] for v in graph.values.values() if v.view is not None}
    plan = json.loads((tmp_path / "layout_plan.json").read_text())["values"]
    assert shared and all(plan[n]["location"] == "dram" for n in shared)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["memory"]["on_chip"]["shared_values"] == len(shared)
    elided = [x for x in report["layers"] if x.get("elided")]
    assert [x["op"] for x in elided] == ["concat"] * 3
    assert all(x["device_time_s"] == 0 for x in elided)
    assert " in %concat_" in (tmp_path / "l3ir.txt").read_text()  # where each part lies


def _fire_modules(n: int) -> tuple[GraphBuilder, dict]:
    """`n` SqueezeNet fire modules: a squeeze conv, then two expand convs concatenated."""
    b = GraphBuilder("fires")
    h = b.input("x", (1, 8, 6, 6), "float")
    for i in range(n):
        s = _conv(b, h, 8, 4, f"s{i}")
        h = b.concat(_conv(b, s, 4, 4, f"e{i}a"), _conv(b, s, 4, 4, f"e{i}b"), axis=1)
    b.output(b.global_avg_pool2d(h), "y")
    return b, {"x": RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)}


def test_a_pipelined_compile_shares_buffers_within_a_stage():
    b, inputs = _fire_modules(4)
    mpmd = {"devices": [0, 1], "microbatches": 2}
    stacked = {k: np.stack([v, v * 0.5]) for k, v in inputs.items()}
    with mnrt.Context() as ctx:
        compiled = ctx.compile(b, inputs, options={"mpmd": mpmd, "float_dtype": "float"})
        got = compiled(stacked)["y"]
        lowered = compiled.lowered.values()
        views = sum(len(low.program.views) for low in lowered)
        concats = sum(k.op == "concat" for low in lowered for k in low.program.kernels)
        compiled.close()
        one = ctx.compile(b, inputs, options={"float_dtype": "float"})
        for m in range(2):
            np.testing.assert_array_equal(got[m], one({"x": stacked["x"][m]})["y"].cpu())
    # a stage that holds a fire module whole writes its expand convs into one buffer (the
    # one whose outputs cross to the other stage keeps its concatenation)
    assert views >= 2 and concats < 4


@pytest.mark.parametrize(
    "batch, axis, elided", [(1, 1, True), (2, 1, False), (1, 3, False), (2, 0, True)]
)
def test_a_slice_that_is_one_run_of_its_input_is_that_run(batch, axis, elided, monkeypatch):
    """ShuffleNet v2's channel split at batch 1: each half is a run of the input; at batch
    2, or cut along the width, it is strided, and copied."""
    b = GraphBuilder("g")
    x = b.input("x", (batch, 4, 6, 6), "float")
    h = _conv(b, x, 4, 8, "w")
    ends = (batch, 8, 6, 6)
    half = [n // 2 if i == axis else n for i, n in enumerate(ends)]
    left = b.slice(h, starts=(0,), ends=(half[axis],), axes=(axis,))
    right = b.slice(h, starts=(half[axis],), ends=(ends[axis],), axes=(axis,))
    b.output(b.add(b.relu(left), b.neg(right)), "y")
    inputs = {"x": RNG.standard_normal((batch, 4, 6, 6)).astype(np.float32)}
    graph, kernels, ran = _compile(b, inputs)
    assert ("slice" not in kernels) is elided
    if elided:
        starts = sorted(graph.root_of(n.outputs[0])[1] for n in graph.nodes if n.op == "slice")
        assert starts == [0, batch * 8 * 36 // 2]  # the second half starts half way
    _, copied, want = _compile(b, inputs, elide=False, monkeypatch=monkeypatch)
    assert copied.count("slice") == 2
    np.testing.assert_array_equal(ran["y"], want["y"])


@st.composite
def _copying_graphs(draw):
    """Random graphs of (1, C, 4, 4) values: elementwise kernels, concatenations of two or
    three values along channels (a graph input among them now and then), reshape round
    trips, channel and width slices, some values kept on chip, outputs along the way."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    b = GraphBuilder("copies")
    x = b.input("x", (1, 2, 4, 4), "float")
    vals = [x, b.relu(x)]
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["unary", "concat", "concat", "reshape", "slice"]))
        a = vals[draw(st.integers(0, len(vals) - 1))]
        channels = b.graph.values[a].shape[1]
        if kind == "unary":
            v = draw(st.sampled_from((b.neg, b.relu, b.exp)))(a)
        elif kind == "concat":
            parts = draw(st.lists(st.integers(0, len(vals) - 1), min_size=2, max_size=3))
            v = b.concat(*[vals[i] for i in parts], axis=1)
        elif kind == "reshape":
            v = b.reshape(b.reshape(a, shape=(1, channels * 16)), shape=(1, channels, 4, 4))
        elif channels > 1 and draw(st.booleans()):
            cut = draw(st.integers(1, channels - 1))
            v = b.slice(a, starts=(cut,), ends=(channels,), axes=(1,))  # a run
        else:
            v = b.slice(a, starts=(1,), ends=(4,), axes=(3,))  # strided: copied
            v = b.concat(v, b.slice(a, starts=(0,), ends=(1,), axes=(3,)), axis=3)
        vals.append(v)
    b.output(vals[-1], "y")
    if len(vals) > 3 and draw(st.booleans()):
        b.output(vals[len(vals) // 2], "z")
    graph = b.build()
    for name in graph.values:
        if graph.values[name].role == "temp" and name not in graph.outputs:
            graph.values[name].location = draw(st.sampled_from(["dram", "lm"]))
    return graph, {"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_copying_graphs())
def test_eliding_copies_in_random_graphs_keeps_every_result_bitwise(case):
    graph, inputs = case
    elided = elide_copies(graph)
    elided.verify()
    assert [n.op for n in elided.nodes] == [n.op for n in graph.nodes]
    assert graph_cost(elided).time_s <= graph_cost(graph).time_s * (1 + 1e-12)
    with mnrt.open_device("auto") as dev:
        want, got = run(graph, dev, inputs), run(elided, dev, inputs)
    for name in graph.outputs:
        assert got[name].tobytes() == want[name].tobytes(), name
