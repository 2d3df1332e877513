"""layout_spec / gemm_layout_spec (MN-Core layout notation) and sram_budget (on-chip
placement): parsing and device checks, what the compiler records, and report.json."""

from __future__ import annotations

import itertools
import json
import time

import numpy as np
import pytest
from graph_harness import on_chip_at_each_node
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler import layout as L
from mnrt.compiler.models import MODELS
from mnrt.compiler.mpmd.cost import program_cost
from mnrt.compiler.node_cost import graph_cost, node_cost
from mnrt.compiler.options import OptionError, resolve
from mnrt.compiler.placement import ON_CHIP, on_chip_bytes, place
from mnrt.compiler.placement import summary as placement_summary
from mnrt.device import dtypes as dt
from mnrt.device.kernels import TensorSpec, lookup

# Layouts from PFN's public MN-Core material, with the shapes they describe.
PUBLISHED = [
    ("((8_L2B:1, 4:2, 8_L1B:1), (2:1, 4_PE:1, 2_W:1))", (256, 16), 8),
    ("((8_L2B:1, 4:2, 8_L1B:1), (2:1, 4_PE:1, 2_W:1); B@[MAB])", (256, 16), 8),
    ("((4:2,), (2:1, 4_PE:1, 2_W:1))", (4, 16), 8),
    (
        "((2_L2B:1, 16_MAB, 4:64), (2_L1B:4, 4_PE, 2_W, 8:1), (4_L2B:2, 4_L1B:1, 8:8))",
        (128, 128, 128),
        256,
    ),
]


@pytest.mark.parametrize(("text", "shape", "long_words"), PUBLISHED)
def test_published_layouts_parse_and_print_back(text, shape, long_words):
    layout = L.parse(text)
    assert layout.shape == shape and layout.long_words_per_pe() == long_words
    assert str(layout) == text and L.parse(str(layout)) == layout
    assert L.fit(layout, shape) is None
    assert "covers" in L.fit(layout, (shape[0] * 2, *shape[1:]))
    assert "rank" in L.fit(layout, (*shape, 1))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8_L2B:1", "parenthesised list of axes"),
        ("((8_L2B:1) (4:1))", "separated by commas"),
        ("((8_XYZ),)", "unknown unit 'XYZ'"),
        ("((9_L2B),)", "reaches L2B index 8, but there are 8 on the chip"),
        ("((2_PE:1, 2_PE:2, 2_PE:1),)", "reaches PE index 4"),
        ("((4_L2B:1, 2_L2B:2),)", "same L2B"),
        ("((4:1, 2:2),)", "share a local-memory address"),
        ("((4096:1), (8:4096))", "bytes of local memory per PE, more than its 32768"),
        ("((8_MAB:1); B@[MAB])", "both split over and broadcast"),
        ("((8_MAB:1); B@[Q])", "unknown unit 'Q'"),
        ("((8_MAB:1); MAB)", "expected B@[UNIT"),
        ("((8_L2B:0),)", "count and stride >= 1"),
        ("((x),)", "is not N, N:STRIDE"),
        ("(((),)", "separated by commas"),
    ],
)
def test_bad_layouts_say_what_is_wrong(text, message):
    with pytest.raises(L.LayoutError, match=message.replace("(", r"\(").replace("[", r"\[")):
        L.parse(text)


def test_a_hostile_layout_is_refused_without_enumerating_it():
    # 2**60 index combinations over 61 addresses: two must collide, found without listing.
    start = time.perf_counter()
    with pytest.raises(L.LayoutError, match="share a local-memory address"):
        L.parse("((" + ", ".join(["2:1"] * 60) + "),)")
    assert time.perf_counter() - start < 10  # a hang guard: enumerating would never end


_UNITS = ["L2B", "L1B", "MAB", "PE", "W", None]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(1, 4), st.sampled_from(_UNITS), st.none() | st.integers(1, 9)),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=3,
    )
)
# 4,374 long words of local memory: past the PE's 4,096 (parse refused it, rightly).
@example([[(3, None, None), (3, None, None)], [(2, None, None), (3, None, None), (3, None, None)],
          [(3, None, None), (3, None, None), (3, None, None)]])  # fmt: skip
def test_parse_accepts_exactly_the_layouts_that_fit_the_device(axes):
    text = "(" + ", ".join(
        "(" + ", ".join(f"{c}{'_' + u if u else ''}{':' + str(s) if s else ''}" for c, u, s in a)
        + ",)" for a in axes
    ) + ")"  # fmt: skip
    layout = L.Layout(tuple(tuple(L.Factor(c, u, s) for c, u, s in a) for a in axes))
    counts = L.unit_counts(mnrt.MNCORE2)
    spec = mnrt.MNCORE2
    local_words = spec.lm_bytes_per_pe // (spec.words_per_long_word * 4)  # long words
    ok = True
    for kind in _UNITS:
        pairs = layout.strides(kind)
        offsets = [sum(i * s for i, (_, s) in zip(idx, pairs))
                   for idx in itertools.product(*(range(c) for c, _ in pairs))]  # fmt: skip
        limit = counts[kind][0] if kind else local_words  # addresses: local memory's size
        ok &= len(set(offsets)) == len(offsets) and max(offsets, default=0) < limit
    try:
        parsed = L.parse(text)
    except L.LayoutError:
        assert not ok
    else:
        assert ok and parsed == layout and L.parse(str(parsed)) == parsed


def test_bad_layout_options_are_option_errors():
    with pytest.raises(OptionError, match="option layout_spec .* unknown unit 'Q'"):
        resolve({"layout_spec": "((8_Q),)"})
    with pytest.raises(OptionError, match="option gemm_layout_spec .* same PE"):
        resolve({"gemm_layout_spec": "((2_PE:1, 2_PE:1),)"})


ACTIVATION = "((8_L2B:1, 8_L1B:1), (16_MAB:1, 4_PE:1, 2_W:1))"  # [64, 128]
WEIGHT = "((8_L2B:1, 16:1), (16_MAB:1, 4_PE:1, 2_W:1))"  # [128, 128]


def _compile(ctx, tmp_path, **options):
    builder, inputs = MODELS["transformer"]()  # seq 64, dim 128
    cg = tmp_path / "cg"
    compiled = ctx.compile(builder, inputs, codegen_dir=cg, options=options)
    return compiled, json.loads((cg / "report.json").read_text()), (cg / "l3ir.txt").read_text()


def test_layout_specs_go_to_the_values_they_describe(ctx, tmp_path):
    compiled, report, l3ir = _compile(
        ctx, tmp_path, layout_spec=ACTIVATION, gemm_layout_spec=WEIGHT
    )
    values = compiled.graph.values
    act = [n for n, v in values.items() if v.layout == ACTIVATION]
    weights = [n for n, v in values.items() if v.layout == WEIGHT]
    assert act and all(values[n].shape == (64, 128) and values[n].role != "param" for n in act)
    assert weights and all(values[n].shape == (128, 128) for n in weights)
    assert f"layout={ACTIVATION}" in l3ir and f"layout={WEIGHT}" in l3ir
    lay = report["layout"]
    assert lay["values_per_layout"][ACTIVATION] == len(act)
    assert lay["unfitted_count"] > 0  # e.g. the [4, 64, 64] attention scores
    assert all(u["why"] and u["option"] in ("layout_spec", "gemm_layout_spec")
               for u in lay["unfitted"])  # fmt: skip
    # What is recorded changes no result: the kernels work on dense arrays either way.
    assert mnrt.replay(tmp_path / "cg" / "model.mnlb").passed


def test_sram_budget_places_temporaries_on_chip_within_it(ctx, tmp_path):
    # spill_opt keeps every temporary that saves time on chip when all of them fit (the
    # default, reuse_consecutive, keeps only those read right after they are made); legacy
    # is the planner that sends no value to DRAM, so the count is placement's own.
    compiled, report, l3ir = _compile(ctx, tmp_path, scheduler="spill_opt", layout_planner="legacy")
    whole = report["memory"]["on_chip"]
    assert whole["budget_bytes"] == on_chip_bytes() and whole["spilled_values"] == 0
    assert f"@{ON_CHIP}" in l3ir
    graph = compiled.graph
    for n in (*graph.inputs, *graph.outputs, *graph.params):
        assert graph.values[n].location == "dram"

    budget = whole["peak_on_chip_bytes"] // 3
    _, report, _ = _compile(ctx, tmp_path, sram_budget=budget, scheduler="spill_opt")
    part = report["memory"]["on_chip"]
    assert part["budget_bytes"] == budget and 0 < part["peak_on_chip_bytes"] <= budget
    assert part["on_chip_values"] > 0 and part["spilled_values"] > 0

    compiled, report, l3ir = _compile(ctx, tmp_path, sram_budget=1, scheduler="spill_opt")
    assert report["memory"]["on_chip"]["on_chip_values"] == 0 and "@lm" not in l3ir
    assert all(v.location == "dram" for v in compiled.graph.values.values())
    assert report["memory"]["on_chip"]["peak_on_chip_bytes"] == 0


def test_on_chip_operands_are_priced_as_on_chip_traffic():
    dev = mnrt.open_device(0)
    try:
        relu = lookup("relu")
        spec = TensorSpec((1024,), dt.FLOAT)
        costs = [
            dev._backend.kernel_cost(relu, [spec], [spec], relu.check_attrs(attrs))
            for attrs in ({}, {"onchip": (0,)}, {"onchip": (0, 1)})
        ]
    finally:
        dev.close()
    assert [c.dram_bytes for c in costs] == [8192.0, 4096.0, 0.0]
    assert costs[0].time_s > costs[2].time_s and costs[0].energy_j > costs[1].energy_j
    for bad in ((2,), (0, 0), (-1,)):
        with pytest.raises(mnrt.KernelAttributeError, match="'onchip' lists operand positions"):
            mnrt.Kernel("relu", ["x"], ["y"], {"onchip": bad})


def test_sram_budget_changes_modelled_time_and_energy_consistently(ctx, tmp_path):
    builder, inputs = MODELS["transformer"]()
    runs = {}
    for budget in (1, 0):  # nothing on chip; every temporary on chip
        compiled = ctx.compile(builder, inputs, options={"sram_budget": budget})
        onchip = [k.attrs.get("onchip", ()) for k in compiled.lowered.program.kernels]
        assert any(onchip) == (budget == 0)
        path = tmp_path / f"b{budget}.mnlb"
        compiled.save_binary(path)
        replayed = mnrt.replay(path)
        assert replayed.passed
        runs[budget] = (compiled.report([])["total"], replayed.timings)
    (dram, dram_replay), (chip, chip_replay) = runs[1], runs[0]
    assert chip["device_time_s"] < dram["device_time_s"] and chip["energy_j"] < dram["energy_j"]
    # The binary carries the placement: its replay is priced the same way.
    saved = dram["device_time_s"] - chip["device_time_s"]
    assert dram_replay["device_time_s"] - chip_replay["device_time_s"] == pytest.approx(saved)


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_chains_keep_intermediates_only_in_the_local_memory_placement_leaves(ctx, model):
    """A chain's intermediates take what the program does not keep on chip within its
    sram_budget (`lm_room`), not the chip's whole local memory: a tight budget sends them
    through DRAM, and the chains model slower."""
    builder, inputs = MODELS[model]()
    chains = {}
    for budget in (0, 1 << 12, 1):
        compiled = ctx.compile(
            builder, inputs, options={"option_json": "O3", "sram_budget": budget}
        )
        graph, live = compiled.graph, on_chip_at_each_node(compiled.graph)
        at = [i for i, n in enumerate(graph.nodes) if n.op == "chain"]
        assert at
        for i in at:
            assert graph.nodes[i].attrs["lm_room"] == max(0, (budget or on_chip_bytes()) - live[i])
        plan = compiled.lowered.program.plan(compiled.lowered.bindings)
        steps = [s for s in plan.steps if s.kdef.name == "chain"]
        kernels = [k for k in compiled.lowered.program.kernels if k.op == "chain"]
        assert [k.attrs["lm_room"] for k in kernels] == [
            graph.nodes[i].attrs["lm_room"] for i in at
        ]
        chains[budget] = (
            sum(s.modelled.dram_bytes for s in steps),
            sum(s.modelled.time_s for s in steps),
        )
    assert chains[1 << 12][0] > chains[0][0] and chains[1 << 12][1] > chains[0][1]
    assert chains[1][0] >= chains[1 << 12][0]


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(sorted(MODELS)),
    seed=st.integers(0, 3),
    fraction=st.floats(0.0, 1.2),
)
def test_placement_never_holds_more_than_the_budget_on_chip(model, seed, fraction):
    graph = MODELS[model](seed=seed)[0].build()
    everything = place(graph, 0)
    full = placement_summary(everything, 0)["peak_on_chip_bytes"]
    budget = max(1, int(full * fraction))
    placed = place(graph, budget)
    report = placement_summary(placed, budget)
    assert report["peak_on_chip_bytes"] <= budget
    temps = [n for n, v in placed.values.items() if v.role == "temp" and n not in placed.outputs]
    assert report["on_chip_values"] + report["spilled_values"] == len(temps)
    for name, v in placed.values.items():
        if v.location == ON_CHIP:
            assert name in temps
    if budget >= full:
        assert report["spilled_values"] == 0


def _graph_with_stale_onchip():
    b = GraphBuilder("stale")
    x = b.input("x", (4, 8), "float")
    h = b.relu(x, onchip=(0,))  # x is a graph input: it lives in DRAM whatever this says
    b.output(b.neg(h, onchip=(1,)), "y")
    return b


@pytest.mark.parametrize("budget", [1, 0])
def test_kernels_keep_on_chip_exactly_what_placement_put_there(ctx, tmp_path, budget):
    compiled = ctx.compile(
        _graph_with_stale_onchip(),
        {"x": np.ones((4, 8), np.float32)},
        codegen_dir=tmp_path / "cg",
        options={"sram_budget": budget},
    )
    graph = compiled.graph
    for node, kernel in zip(graph.nodes, compiled.lowered.program.kernels, strict=True):
        operands = [*node.inputs, *node.outputs]
        placed = tuple(i for i, v in enumerate(operands) if graph.values[v].location == ON_CHIP)
        assert kernel.attrs.get("onchip", ()) == placed, kernel
    l3ir = (tmp_path / "cg" / "l3ir.txt").read_text()
    assert "onchip" not in l3ir and ("@lm" in l3ir) == (budget == 0)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_placement_respects_the_budget_at_every_node(model):
    graph = MODELS[model](seed=1)[0].build()
    full = max(on_chip_at_each_node(place(graph, 0)))
    for fraction in (0.1, 0.4, 0.75):
        budget = max(1, int(full * fraction))
        assert max(on_chip_at_each_node(place(graph, budget))) <= budget


@pytest.mark.parametrize(("text", "shape", "long_words"), PUBLISHED)
def test_locate_puts_every_element_in_one_place_of_its_own(text, shape, long_words):
    layout = L.parse(text)
    index = np.indices(shape).reshape(len(shape), -1)
    where = L.locate(layout, list(index))
    keys = np.stack([where[k] for k in ("L2B", "L1B", "MAB", "PE", "W", "address")])
    assert len({tuple(c) for c in keys.T}) == index.shape[1]  # no two elements meet
    assert where["address"].max() < long_words


def test_locate_follows_the_notation_digit_by_digit():
    layout = L.parse("((8_L2B:1, 4:2, 8_L1B:1), (2:1, 4_PE:1, 2_W:1))")
    # Row 77 = L2B 2, address digit 1 (stride 2), L1B 5; column 13 = address 1, PE 2, W 1.
    where = L.locate(layout, [np.array([77]), np.array([13])])
    assert {k: int(v[0]) for k, v in where.items()} == {
        "L2B": 2, "L1B": 5, "MAB": 0, "PE": 2, "W": 1, "T": 0, "address": 2 + 1,
    }  # fmt: skip
    with pytest.raises(L.LayoutError, match="0..255"):
        L.locate(layout, [np.array([256]), np.array([0])])
    with pytest.raises(L.LayoutError, match="2 axes"):
        L.locate(layout, [np.array([0])])


def test_node_cost_prices_anew_what_changed_since_it_last_priced_a_node(monkeypatch):
    """Prices are kept (a layout planner asks for the same ones tens of thousands of times),
    but a node whose operand moved on chip, or whose kernel is registered anew, is priced
    again."""
    import dataclasses

    from mnrt.device.kernels import registry
    from mnrt.device.mapping import model_kernel_call

    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    cnn, x = MODELS["cnn"]()
    graph = ctx.compile(cnn, x, options={"option_json": "O0", "float_dtype": "float"}).graph
    node = next(n for n in graph.nodes if n.op == "relu")
    first = node_cost(graph, node)
    assert node_cost(graph, node) is first
    value = graph.values[node.outputs[0]]
    was, value.location = value.location, ON_CHIP if value.location != ON_CHIP else "dram"
    moved = node_cost(graph, node)
    assert moved.time_s != first.time_s
    value.location = was
    relu = registry.lookup("relu")

    def dearer(ins, outs, attrs):
        cost = relu.cost(ins, outs, attrs)
        return dataclasses.replace(cost, flops=cost.flops * 1000, dram_bytes=cost.dram_bytes * 9)

    monkeypatch.setitem(registry._REGISTRY, "relu", dataclasses.replace(relu, cost=dearer))
    again = node_cost(graph, node)
    assert again.time_s > first.time_s
    specs = [TensorSpec(tuple(graph.values[n].shape), graph.values[n].dtype) for n in node.inputs]
    outs = [TensorSpec(tuple(graph.values[n].shape), graph.values[n].dtype) for n in node.outputs]
    assert again == model_kernel_call(mnrt.MNCORE2, lookup("relu"), specs, outs, node.attrs)


@pytest.mark.parametrize("preset", ["O0", "O3"])
def test_node_cost_is_what_the_lowered_program_is_priced_at(preset):
    """Schedulers and planners choose by node_cost: it must be the replay's own price."""
    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    cnn, x = MODELS["cnn"]()
    compiled = ctx.compile(cnn, x, options={"option_json": preset, "float_dtype": "mixed"})
    runs = program_cost(compiled.lowered.program, compiled.lowered.bindings)
    assert graph_cost(compiled.graph).time_s == pytest.approx(runs.time_s, rel=1e-12)
