"""half_where_it_pays: mixed precision keeps a region in half only where the timing model
prices it, casts included, as faster than the same kernels in float."""

from __future__ import annotations

import itertools
import json

import numpy as np
from graph_harness import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder, pipeline
from mnrt.compiler.cast_motion import cancel_round_trip_casts, widen_after_moving
from mnrt.compiler.map_graph import mapped
from mnrt.compiler.node_cost import graph_cost, node_cost
from mnrt.compiler.passes import apply_float_dtype, common_subexpressions
from mnrt.compiler.precision import half_where_it_pays, narrow_where_it_pays, products_write_float
from mnrt.device.numerics import round_to_half

EFFORT = 2  # O2's mapping_effort


def ops(graph):
    return [n.op for n in graph.nodes]


def _mixed(graph):
    """What O2 makes of a float graph before the pass: float_dtype=mixed and its clean-up."""
    g = apply_float_dtype(graph, "mixed")
    return cancel_round_trip_casts(widen_after_moving(common_subexpressions(g)))


def _projections(rows: int, width: int, rng=None):
    """A transformer's feed-forward at `rows` tokens: gemm, a float add between, a
    transpose and reshape of the first product, a second gemm whose weight a float kernel
    reads too, the result a graph output."""
    rng = rng or np.random.default_rng(0)
    b = GraphBuilder("ffn")
    x = b.input("x", (rows, width), "float")
    w1 = b.param("w1", rng.standard_normal((width, width)).astype(np.float32) / width**0.5)
    w2 = b.param("w2", rng.standard_normal((width, width)).astype(np.float32) / width**0.5)
    h = b.gemm(x, w1)
    h = b.reshape(b.transpose(h, perm=(1, 0)), shape=(rows, width))
    h = b.add(h, x)
    b.output(b.gemm(h, w2), "y")
    b.output(b.add(w2, w2), "w2_twice")  # a float kernel reading the second weight
    inputs = {"x": rng.standard_normal((rows, width)).astype(np.float32)}
    return b.build(), inputs


def test_small_products_run_in_float_without_casts(dev):
    graph, inputs = _projections(4, 32)
    mixed = _mixed(graph)
    assert ops(mixed).count("cast") == 4  # into and out of each product
    lean, account = half_where_it_pays(mixed, EFFORT)
    assert "cast" not in ops(lean)
    assert account["regions_in_float"] == 2 and account["regions_in_half"] == 0
    assert account["casts_dropped"] == 4 and account["time_saved_s"] > 0
    assert all(v.dtype.name == "float" for v in lean.values.values())
    # the half copy of w2 is w2 again: one parameter, which both kernels read
    assert sorted(lean.params) == ["w1", "w2"]
    assert graph_cost(lean).time_s < graph_cost(mixed).time_s
    float_result = run(apply_float_dtype(graph, "float"), dev, inputs)
    for name, value in run(lean, dev, inputs).items():
        assert value.tobytes() == float_result[name].tobytes(), name


def test_large_products_stay_in_half():
    graph, _ = _projections(512, 1024)
    mixed = _mixed(graph)
    kept, account = half_where_it_pays(mixed, EFFORT)
    assert kept is mixed
    assert account["regions_in_half"] == 2 and account["regions_in_float"] == 0
    assert all(
        mixed.values[n.outputs[0]].dtype.name == "half" for n in mixed.nodes if n.op == "gemm"
    )


def test_a_region_is_decided_whole():
    """Two products joined by half values (the round trip between them cancelled) go to
    float together or not at all: a cast between them would be a kernel of its own."""
    rng = np.random.default_rng(2)
    b = GraphBuilder("chain")
    x = b.input("x", (4, 16), "float")
    h = b.gemm(x, b.param("w1", rng.standard_normal((16, 16)).astype(np.float32)))
    b.output(b.gemm(h, b.param("w2", rng.standard_normal((16, 16)).astype(np.float32))), "y")
    mixed = _mixed(b.build())
    assert ops(mixed) == ["cast", "gemm", "gemm", "cast"]
    assert ops(half_where_it_pays(mixed, EFFORT)[0]) == ["gemm", "gemm"]


def test_an_output_keeps_its_name_and_dtype(dev):
    graph, inputs = _projections(2, 8)
    lean = half_where_it_pays(_mixed(graph), EFFORT)[0]
    assert lean.outputs == graph.outputs
    assert lean.values["y"].dtype.name == "float"
    (writer,) = [n for n in lean.nodes if "y" in n.outputs]
    assert writer.op == "gemm"  # the product writes the output itself
    assert set(run(lean, dev, inputs)) == {"y", "w2_twice"}


def test_a_rounding_with_no_kernel_between_stays():
    """float -> half -> float with nothing in half between rounds the values: no region."""
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float")
    b.output(b.cast(b.cast(x, to="half"), to="float"), "y")
    g = b.build()
    assert half_where_it_pays(g, EFFORT)[0] is g


def test_o2_is_no_slower_than_o1_on_small_projections(tmp_path):
    """The preset's promise the pass keeps: O2 (mixed) had been slower than O1 (float) on
    a short-sequence transformer, its casts costing more than half saved. report.json's
    phase says what the pass did."""
    graph, inputs = _projections(4, 64)
    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    try:
        times = {}
        for preset in ("O1", "O2"):
            options = {"option_json": preset}
            compiled = ctx.compile(graph, inputs, codegen_dir=tmp_path / preset, options=options)
            times[preset] = graph_cost(compiled.graph).time_s
            compiled.close()
        assert times["O2"] <= times["O1"]
        report = json.loads((tmp_path / "O2" / "report.json").read_text())
        (phase,) = [p for p in report["phases"] if p["name"] == "half_where_it_pays"]
        assert phase["account"]["regions_in_float"] == 2
        assert phase["account"]["casts_dropped"] == 4
    finally:
        ctx.close()


def _mapped_time(graph) -> float:
    """The graph's modelled time with each product mapped as map_graph will map it: what
    the passes weigh."""
    return sum(node_cost(graph, mapped(graph, n, EFFORT)).time_s for n in graph.nodes)


@st.composite
def _stacks(draw):
    """Random stacks of products (some large enough for half to pay, some not), each
    followed by a float kernel or a move."""
    rows = draw(st.sampled_from([1, 4, 64, 256]))
    widths = draw(st.lists(st.sampled_from([8, 32, 256, 512]), min_size=2, max_size=4))
    after = draw(st.lists(st.sampled_from(["tanh", "transpose", "none"]), min_size=3, max_size=3))
    seed = draw(st.integers(0, 2**16))
    return rows, widths, after, seed


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_stacks())
def test_the_passes_never_cost_time_and_keep_results_within_half(dev, stack):
    rows, widths, after, seed = stack
    rng = np.random.default_rng(seed)
    b = GraphBuilder("stack")
    h = b.input("x", (rows, widths[0]), "float")
    for i, (n, m) in enumerate(itertools.pairwise(widths)):
        w = rng.standard_normal((n, m)).astype(np.float32) / n**0.5
        h = b.gemm(h, b.param(f"w{i}", w))
        if after[i] == "tanh":
            h = b.tanh(h)
        elif after[i] == "transpose":
            h = b.reshape(b.transpose(h, perm=(1, 0)), shape=(rows, m))
    b.output(h, "y")
    graph = b.build()
    mixed = _mixed(graph)
    kept = half_where_it_pays(mixed, EFFORT)[0]
    lean = products_write_float(kept)
    kept.verify()
    lean.verify()
    assert _mapped_time(kept) <= _mapped_time(mixed)
    assert _mapped_time(lean) <= _mapped_time(kept)
    inputs = {"x": rng.standard_normal((rows, widths[0])).astype(np.float32)}
    want = run(apply_float_dtype(graph, "float"), dev, inputs)["y"]
    got = run(lean, dev, inputs)["y"]
    scale = float(np.abs(want).max()) or 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2 * scale)


def _conv_then(readers: str):
    """A large half conv (half pays for it) whose result is widened for a float add, and
    with readers="both" also read in half by a second conv."""
    rng = np.random.default_rng(4)
    b = GraphBuilder("conv")
    x = b.input("x", (1, 128, 28, 28), "float")
    w = b.param("w", rng.standard_normal((128, 128, 3, 3)).astype(np.float32) * 0.05)
    h = b.conv2d(x, w, padding=(1, 1, 1, 1))
    b.output(b.add(h, x), "y")
    if readers == "both":
        v = b.param("v", rng.standard_normal((8, 128, 1, 1)).astype(np.float32) * 0.05)
        b.output(b.conv2d(h, v), "z")
    inputs = {"x": rng.standard_normal((1, 128, 28, 28)).astype(np.float32)}
    return b.build(), inputs


def test_a_product_only_widened_stores_its_float_accumulator(dev):
    """The conv writes float (half in, float out) and the cast after it is gone; its result
    is the accumulator the half result was rounded from, so rounding it to half gives the
    half result bit for bit."""
    graph, inputs = _conv_then("add")
    mixed, _ = half_where_it_pays(_mixed(graph), EFFORT)
    assert ops(mixed) == ["cast", "conv2d", "cast", "add"]
    lean = products_write_float(mixed)
    assert ops(lean) == ["cast", "conv2d", "add"]
    (conv,) = [n for n in lean.nodes if n.op == "conv2d"]
    assert lean.values[conv.outputs[0]].dtype.name == "float"
    assert graph_cost(lean).time_s < graph_cost(mixed).time_s
    # the conv's result as each graph stores it: its output made a graph output
    stored = {}
    for name, g in (("half", mixed), ("float", lean)):
        g = g.copy()
        (c,) = [n for n in g.nodes if n.op == "conv2d"]
        g.outputs = [c.outputs[0]]
        stored[name] = run(g, dev, inputs)[c.outputs[0]]
    assert stored["float"].dtype == np.float32
    rounded = round_to_half(stored["float"])
    assert rounded.tobytes() == stored["half"].astype(np.float32).tobytes()
    assert not np.array_equal(stored["float"], rounded)  # the rounding it skips


def test_a_product_read_in_half_too_keeps_its_half_result():
    """The first conv's half result feeds the second conv too, so it stays half, widened
    for the add; the second conv's, only widened into the output z, is written as z."""
    graph, _ = _conv_then("both")
    mixed, _ = half_where_it_pays(_mixed(graph), EFFORT)
    lean = products_write_float(mixed)
    first, second = [n for n in lean.nodes if n.op == "conv2d"]
    assert lean.values[first.outputs[0]].dtype.name == "half"
    assert second.outputs == ["z"] and lean.values["z"].dtype.name == "float"
    assert ops(lean).count("cast") == ops(mixed).count("cast") - 1


def _conv_weight(b: GraphBuilder, rng, name: str, shape: tuple[int, ...]) -> str:
    fan_in = int(np.prod(shape[1:]))
    return b.param(name, (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))


def _inception(blocks: int = 3, channels: int = 64, size: int = 28):
    """GoogLeNet's Inception blocks: a 1x1 conv, a 3x3 conv, and a max pooling and the 1x1
    conv after it (the pool projection), each on the block's input, concatenated."""
    rng = np.random.default_rng(13)
    b = GraphBuilder("inception")
    wide = 3 * channels
    h = b.conv2d(b.input("x", (1, 3, size, size), "float"),
                 _conv_weight(b, rng, "stem", (wide, 3, 1, 1)), epilogue="relu")  # fmt: skip
    for i in range(blocks):
        one = b.conv2d(h, _conv_weight(b, rng, f"a{i}", (channels, wide, 1, 1)), epilogue="relu")
        three = b.conv2d(h, _conv_weight(b, rng, f"b{i}", (channels, wide, 3, 3)),
                         padding=(1, 1, 1, 1), epilogue="relu")  # fmt: skip
        pooled = b.max_pool2d(h, kernel=(3, 3), stride=(1, 1), padding=(1, 1, 1, 1))
        project = _conv_weight(b, rng, f"c{i}", (channels, wide, 1, 1))
        h = b.concat(one, three, b.conv2d(pooled, project, epilogue="relu"), axis=1)
    b.output(b.global_avg_pool2d(h), "y")
    return b.build(), {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def _dense(layers: int = 4, growth: int = 64, size: int = 28):
    """DenseNet's block: each layer a norm (scale and shift), a ReLU and a 3x3 conv of the
    concatenation of every result before it."""
    rng = np.random.default_rng(14)
    b = GraphBuilder("dense")
    features = [b.conv2d(b.input("x", (1, 3, size, size), "float"),
                         _conv_weight(b, rng, "stem", (2 * growth, 3, 1, 1)))]  # fmt: skip
    for i in range(layers):
        x = b.concat(*features, axis=1) if len(features) > 1 else features[0]
        cin = (2 + i) * growth
        scale = b.param(f"s{i}", rng.uniform(0.5, 1.5, (1, cin, 1, 1)).astype(np.float32))
        shift = b.param(f"t{i}", rng.uniform(-0.5, 0.5, (1, cin, 1, 1)).astype(np.float32))
        h = b.relu(b.add(b.mul(x, scale), shift))
        conv = _conv_weight(b, rng, f"c{i}", (growth, cin, 3, 3))
        features.append(b.conv2d(h, conv, padding=(1, 1, 1, 1)))
    b.output(b.global_avg_pool2d(b.concat(*features, axis=1)), "y")
    return b.build(), {}


def _narrowed(graph):
    """What narrow_where_it_pays weighs: mixed precision's graph at O2 before it."""
    return common_subexpressions(apply_float_dtype(graph, "mixed"))


def test_an_inception_block_keeps_its_concatenation_and_pooling_in_half(dev):
    """Concatenated narrow, an Inception block's result stays half; its pooling, read
    between two half convs, then runs on half values and the widening and rounding around
    it go: fewer casts, priced faster, the same bits (torchvision's GoogLeNet at O2 mixed:
    201.2 -> 179.6 us modelled)."""
    graph, inputs = _inception()
    mixed = _narrowed(graph)
    joined, account = narrow_where_it_pays(mixed, EFFORT)
    assert account["concatenations_narrow"] and account["time_saved_s"] > 0
    assert account["energy_saved_j"] >= 0
    moved = cancel_round_trip_casts(widen_after_moving(mixed))
    assert ops(joined).count("cast") < ops(moved).count("cast")
    halves = [n for n in joined.nodes if n.op in ("concat", "max_pool2d")]
    assert len(halves) == 6 and all(
        joined.values[n.outputs[0]].dtype.name == "half" for n in halves
    )
    assert run(joined, dev, inputs)["y"].tobytes() == run(moved, dev, inputs)["y"].tobytes()


def test_a_dense_block_keeps_its_concatenations_in_float():
    """Concatenated narrow, each DenseNet layer's input would be widened for its norm by a
    kernel of its own, where each layer's result is widened once: priced slower, the
    graph is the one widen_after_moving gives (torchvision's DenseNet-121 at O2 mixed:
    narrow, 64.5% slower)."""
    graph, _ = _dense()
    mixed = _narrowed(graph)
    kept, account = narrow_where_it_pays(mixed, EFFORT)
    assert account == {"concatenations_narrow": False, "time_saved_s": 0.0, "energy_saved_j": 0.0}
    assert kept.dump() == cancel_round_trip_casts(widen_after_moving(mixed)).dump()
    concats = [n for n in kept.nodes if n.op == "concat"]
    assert concats and all(kept.values[n.outputs[0]].dtype.name == "float" for n in concats)


def test_o2_runs_inception_blocks_in_fewer_kernels(monkeypatch):
    """The O2 compile against O2's passes before narrow_where_it_pays: fewer kernels,
    modelled faster, the results within half's rounding of the old ones."""
    graph, inputs = _inception()
    before = (common_subexpressions, widen_after_moving, cancel_round_trip_casts,
              half_where_it_pays, products_write_float)  # fmt: skip
    options = {"option_json": "O2", "float_dtype": "mixed"}
    with mnrt.Context() as ctx:
        now = ctx.compile(graph, inputs, options=options)
        monkeypatch.setitem(pipeline.AFTER_FLOAT_DTYPE, "O2", before)
        was = ctx.compile(graph, inputs, options=options)
        kernels = [len(c.lowered.program.kernels) for c in (now, was)]
        assert kernels[0] < kernels[1]
        timed = [c.lowered.program.plan(c.lowered.bindings).modelled.time_s for c in (now, was)]
        assert timed[0] < timed[1]
        # was: each branch's conv stored its float accumulator into a float concatenation;
        # now each stores half, as a conv read by half kernels does
        got, want = now(inputs)["y"].cpu(), was(inputs)["y"].cpu()
        np.testing.assert_allclose(got, want, rtol=2**-8, atol=2**-9 * np.abs(want).max())
