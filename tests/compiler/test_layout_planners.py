"""Layout planners (lpz, bidi, legacy): the layouts a matrix kernel's mapping implies, the
switches each planner inserts on hand-built graphs with values kept on chip, the
switch-or-DRAM decision, layout_plan.json, and that no planner changes a result."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler import layout as L
from mnrt.compiler.layout_planners import ALIASES, PLANNERS, plan_layouts
from mnrt.compiler.map_graph import map_graph
from mnrt.compiler.models import MODELS
from mnrt.compiler.node_cost import graph_cost
from mnrt.compiler.options import OptionError, resolve
from mnrt.compiler.placement import DRAM, ON_CHIP, place
from mnrt.compiler.placement import summary as placement_summary
from mnrt.device import dtypes as dt
from mnrt.device.kernels import TensorSpec, lookup
from mnrt.device.mapped_layout import mapping_layouts, row_major
from mnrt.device.mapping import Mapping, check, problem_of

POW2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64])


@settings(max_examples=120, deadline=None)
@given(
    batch=st.integers(1, 6),
    m=st.integers(1, 300),
    n=st.integers(1, 300),
    k=st.integers(1, 300),
    grid=st.tuples(st.sampled_from([1, 2, 4]), POW2, POW2, st.sampled_from([1, 2, 4])),
    reg=st.sampled_from([4, 8, 16]),
    dtype=st.sampled_from(["half", "float"]),
)
# One PE: the block of 219 x 219 is cut into time slices; 71 slices of 4 rows padded the
# 219 rows to 284, where 55 of 4 cover them.
@example(batch=6, m=219, n=1, k=219, grid=(1, 1, 1, 1), reg=4, dtype="half")
def test_mapping_layouts_parse_back_and_cover_their_operands(batch, m, n, k, grid, reg, dtype):
    d = dt.dtype(dtype)
    ins = [TensorSpec((batch, m, k), d), TensorSpec((batch, k, n), d)]
    outs = [TensorSpec((batch, m, n), d)]
    mp = Mapping(*grid, reg, reg, 16)
    assume(mp.pes <= mnrt.MNCORE2.pe_count)
    layouts = mapping_layouts("gemm", ins, outs, {"mapping": mp.to_attr()})
    for t, lay in zip([*ins, *outs], layouts):
        assert L.parse(str(lay)) == lay and str(L.parse(str(lay))) == str(lay)
        assert L.fit(lay, t.shape, padded=True) is None
        # the grid's split of an axis is padded, never more than one block per grid index
        for have, need in zip(lay.shape, t.shape):
            assert need <= have < need + max(grid) * 64
    # the result spreads over exactly the PEs of the grid's k = 0 slice
    units = 1
    for unit in ("L2B", "L1B", "MAB", "PE"):
        for count, _ in layouts[-1].strides(unit):
            units *= count
    assert units == mp.pe_b * mp.pe_m * mp.pe_n


@settings(max_examples=80, deadline=None)
@given(shape=st.lists(st.integers(1, 300), min_size=1, max_size=3), half=st.booleans())
def test_row_major_layouts_parse_back_and_cover_their_shape(shape, half):
    lay = row_major(tuple(shape), 2 if half else 4)
    assert L.parse(str(lay)) == lay
    assert L.fit(lay, tuple(shape), padded=True) is None
    for have, need in zip(lay.shape, shape):
        assert need <= have < 2 * need  # padded to spread over PEs, by less than itself
    assert lay.long_words_per_pe() * 8 <= mnrt.MNCORE2.lm_bytes_per_pe
    if np.prod(shape) <= 4 * mnrt.MNCORE2.pe_count:
        assert not lay.strides("T")  # spread over the chip, not time-sliced on one PE


def test_a_grid_larger_than_the_chip_has_no_layout():
    d = dt.FLOAT
    ins = [TensorSpec((64, 64), d), TensorSpec((64, 64), d)]
    with pytest.raises(L.LayoutError, match="PEs"):
        mapping_layouts(
            "gemm", ins, [TensorSpec((64, 64), d)], {"mapping": (4, 64, 64, 1, 4, 4, 16, 1, 0)}
        )


def _chain(m=64, k=128, n=64, consumers=1):
    """x -> gemm -> relu -> gemm (-> more gemms reading the relu) -> y."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("chain")
    x = b.input("x", (m, k))
    h = b.relu(b.gemm(x, b.param("w1", rng.standard_normal((k, n)).astype(np.float32))))
    outs = []
    for i in range(consumers):
        w = b.param(f"w{i + 2}", rng.standard_normal((n, n + 4 * i)).astype(np.float32))
        outs.append(b.gemm(h, w))
    for i, o in enumerate(outs):
        b.output(o, f"y{i}")
    return b.build()


def _on_chip(graph, effort=1):
    """The graph as the layout step sees it: temporaries on chip, matrix nodes mapped."""
    return map_graph(place(graph, 0), effort)


def _switches(graph):
    return [n for n in graph.nodes if n.op == "relayout"]


def test_legacy_switches_around_every_matrix_kernel_with_an_on_chip_operand():
    g = _on_chip(_chain())
    planned = plan_layouts(g, "legacy")
    where = [s["where"] for s in planned.notes["layout_plan"]["switches"]]
    # gemm 1 leaves its on-chip result in its own layout: switched back to canonical after
    # it; gemm 2 reads the on-chip relu in canonical: switched to its layout before it
    assert any(w.startswith("after gemm") for w in where)
    assert any(w.startswith("before gemm") for w in where)
    for s in _switches(planned):
        v = planned.values[s.outputs[0]]
        assert v.location == ON_CHIP and v.layout == s.attrs["dst"]
    on_chip = [n for n, v in planned.values.items() if v.location == ON_CHIP]
    canonical = {n: str(row_major(planned.values[n].shape, planned.values[n].dtype.itemsize))
                 for n in on_chip}  # fmt: skip
    kept = [n for n in g.values if n in canonical and g.values[n].location == ON_CHIP]
    assert kept and all(planned.values[n].layout == canonical[n] for n in kept)
    assert plan_layouts(g, "row_major").dump() == planned.dump()  # the old name


def test_lpz_switches_once_per_value_and_layout_and_prices_dram(monkeypatch):
    g = _on_chip(_chain(consumers=3))
    planned = plan_layouts(g, "lpz")
    plan = planned.notes["layout_plan"]
    # No switch where producer and consumer agree: relu keeps gemm 1's layout.
    relu = next(n for n in planned.nodes if n.op == "relu")
    assert not any(s["value"] == relu.inputs[0] for s in plan["switches"])
    pairs = [(s["value"], s["dst"]) for s in plan["switches"]]
    assert len(pairs) == len(set(pairs))
    for d in plan["decisions"]:  # both prices recorded; the cheaper chosen and applied
        cheaper = "dram" if d["through_dram_s"] < d["on_chip_with_switches_s"] else "switch"
        assert d["chosen"] == cheaper
        assert planned.values[d["value"]].location == (DRAM if cheaper == "dram" else ON_CHIP)
    assert plan["decisions"], "the gemms disagree about the relu's layout"


def test_lpz_keeps_a_switch_when_dram_costs_more(monkeypatch):
    """With a DRAM that slow, every switch is cheaper than the detour: kept, one per
    (value, layout), the consumers reading the switched value."""
    import dataclasses

    slow = dataclasses.replace(mnrt.MNCORE2, dram_bandwidth_per_group=1e6)
    g = map_graph(place(_chain(consumers=3), 0), 1, slow)
    built, decisions = PLANNERS["lpz"](g, {}, 1, slow)
    assert decisions and all(d["chosen"] == "switch" for d in decisions)
    assert built.switches
    for s in built.switches:
        readers = [n for n in built.graph.nodes if s.output in n.inputs]
        assert readers and all(n.op in ("gemm", "relayout") for n in readers)


def _random_graph(draw_ops, sizes):
    rng = np.random.default_rng(1)
    b = GraphBuilder("random")
    h = b.input("x", (sizes[0], sizes[1]))
    width = sizes[1]
    for op, size in zip(draw_ops, sizes[2:]):
        if op == "gemm":
            w = rng.standard_normal((width, size)).astype(np.float32)
            h = b.gemm(h, b.param(f"w{len(b.graph.values)}", w))
            width = size
        elif op == "add":
            h = b.add(h, b.relu(h))
        else:
            h = getattr(b, op)(h)
    b.output(h, "y")
    return b.build()


@settings(max_examples=15, deadline=None)
@given(
    ops=st.lists(st.sampled_from(["gemm", "relu", "add", "gelu"]), min_size=2, max_size=6),
    sizes=st.lists(st.sampled_from([8, 16, 48, 64, 128, 256]), min_size=8, max_size=8),
)
def test_bidi_is_never_worse_than_lpz(ops, sizes):
    g = _on_chip(_random_graph(ops, sizes), effort=2)
    lpz = graph_cost(plan_layouts(g, "lpz", effort=2)).time_s
    bidi = graph_cost(plan_layouts(g, "bidi", effort=2)).time_s
    assert bidi <= lpz * (1 + 1e-12)


def test_user_layouts_are_kept_fixed_with_switches_to_what_kernels_need():
    g = _on_chip(_chain())
    relu = next(n for n in g.nodes if n.op == "relu").outputs[0]
    fixed = "((64_L2B... ".replace("64_L2B... ", "8_L2B:1, 8_L1B:1), (64:1,))")
    assert L.fit(L.parse(fixed), g.values[relu].shape) is None
    planned = plan_layouts(g, "lpz", layout_spec=fixed)
    assert planned.values[relu].layout == fixed or planned.values[relu].location == DRAM


def test_the_planner_option_lists_the_registry():
    assert set(PLANNERS) == {"lpz", "bidi", "legacy"} and ALIASES == {"row_major": "legacy"}
    assert resolve({})["layout_planner"] == "lpz"
    assert resolve({"layout_planner": "row_major"})["layout_planner"] == "row_major"
    with pytest.raises(OptionError, match="lpz, bidi, legacy"):
        resolve({"layout_planner": "zigzag"})


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_planner_gives_bitwise_identical_results(model, tmp_path):
    builder, inputs = MODELS[model]()
    results = {}
    with mnrt.Context() as ctx:
        for planner in PLANNERS:
            cg = tmp_path / planner
            compiled = ctx.compile(builder, inputs, codegen_dir=cg,
                                   options={"layout_planner": planner})  # fmt: skip
            results[planner] = {k: v.cpu() for k, v in compiled(inputs).items()}
            plan = json.loads((cg / "layout_plan.json").read_text())
            report = json.loads((cg / "report.json").read_text())["layout"]
            relayouts = _switches(compiled.graph)
            assert plan["planner"] == planner and plan["switch_count"] == len(relayouts)
            assert report["switches"] == len(relayouts)
            assert report["switch_device_time_s"] == pytest.approx(plan["switch_time_s"])
            assert set(plan["values"]) == set(compiled.graph.values)
            for s in plan["switches"]:
                assert s["level"] in L.LEVELS and s["time_s"] > 0 and s["bytes"] > 0
            assert mnrt.replay(cg / "model.mnlb").passed
            if importlib.util.find_spec("onnx"):  # a switch exports as ONNX's Identity
                assert (cg / "model.onnx").is_file()
    for planner, got in results.items():
        for name, y in got.items():
            np.testing.assert_array_equal(y, results["legacy"][name], err_msg=planner)


def test_problem_and_layouts_agree_on_the_padded_sizes():
    d = dt.HALF
    ins = [TensorSpec((100, 40), d), TensorSpec((40, 70), d)]
    outs = [TensorSpec((100, 70), d)]
    mp = Mapping(1, 8, 4, 1, 4, 4, 16)
    p = problem_of(
        "gemm", ins, outs, {}, lookup("gemm").cost(ins, outs, lookup("gemm").check_attrs({})).flops
    )
    assert check(mnrt.MNCORE2, p, mp) is None
    a, b, c = mapping_layouts("gemm", ins, outs, {"mapping": mp.to_attr()})
    assert c.shape == (104, 72) and a.shape[0] == 104 and b.shape[1] == 72


@pytest.mark.parametrize("planner", ["legacy", "lpz"])
def test_switches_keep_the_chip_within_the_sram_budget(planner):
    rng = np.random.default_rng(0)
    b = GraphBuilder("two")
    x = b.input("x", (256, 256))
    w1, w2 = (b.param(f"w{i}", rng.standard_normal((256, 256)).astype(np.float32)) for i in (1, 2))
    b.output(b.gemm(b.gemm(x, w1), w2), "y")
    graph = b.build()
    peak = placement_summary(place(graph, 0), 0)["peak_on_chip_bytes"]  # the one temporary
    g = map_graph(place(graph, peak), 1)
    free = plan_layouts(g, planner)  # legacy: produced and switched copies on chip at once
    assert placement_summary(free, 0)["peak_on_chip_bytes"] > peak or planner == "lpz"
    planned = plan_layouts(g, planner, sram_budget=peak)
    assert placement_summary(planned, peak)["peak_on_chip_bytes"] <= peak
    evicted = [d for d in planned.notes["layout_plan"]["decisions"] if d.get("reason")]
    assert all(planned.values[d["value"]].location == DRAM for d in evicted)
    assert evicted or planner == "lpz"


def test_the_plan_goes_with_a_loaded_or_cached_codegen_dir(tmp_path):
    builder, inputs = MODELS["mlp"]()
    with mnrt.Context() as ctx:
        opts = {"layout_planner": "legacy"}
        cache = mnrt.compiler.CacheOptions(tmp_path / "cache")
        ctx.compile(builder, inputs, codegen_dir=tmp_path / "a", options=opts,
                    cache_options=cache)  # fmt: skip
        ctx.compile(builder, inputs, codegen_dir=tmp_path / "b", options=opts,
                    cache_options=cache)  # a cache hit  # fmt: skip
        ctx.load_codegen_dir(tmp_path / "a").write_codegen_dir(tmp_path / "c", [])
    plans = [json.loads((tmp_path / d / "layout_plan.json").read_text()) for d in "abc"]
    assert plans[0]["switch_count"] > 0 and plans[0] == plans[1] == plans[2]


def test_bidi_switches_upstream_once_where_lpz_switches_twice():
    """h = gemm(x); gemm(relu(h)) and gemm(h) want h in the same layout: lpz switches the
    relu's result and h apart, bidi switches h once, right after its producer, and the relu
    carries the new layout on."""
    import dataclasses

    slow = dataclasses.replace(mnrt.MNCORE2, dram_bandwidth_per_group=1e6)  # switches pay
    rng = np.random.default_rng(0)
    b = GraphBuilder("fork")
    x = b.input("x", (64, 64))
    w = [b.param(f"w{i}", rng.standard_normal((64, 64)).astype(np.float32)) for i in range(3)]
    h = b.gemm(x, w[0])
    b.output(b.gemm(b.relu(h), w[1]), "y1")
    b.output(b.gemm(h, w[2]), "y2")
    g = map_graph(place(b.build(), 0), 1, slow)
    lazy, _ = PLANNERS["lpz"](g, {}, 1, slow)
    both, _ = PLANNERS["bidi"](g, {}, 1, slow)
    assert len(lazy.switches) == 2 and len(both.switches) == 1
    assert both.switches[0].where.startswith("after gemm")
    assert graph_cost(both.graph, slow).time_s < graph_cost(lazy.graph, slow).time_s
