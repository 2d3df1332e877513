"""Schedulers (mnrt/compiler/schedulers): each one's defining choice of order and placement
on small hand-built graphs, the budget held and the modelled-time ordering between them on
random graphs, annealing reproducible whatever the threads, recomputation computing the
same bits, and the CODEGEN_SA_* envs checked."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pytest
from graph_harness import on_chip_at_each_node
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder, schedulers
from mnrt.compiler.chain_fusion import fuse_chains
from mnrt.compiler.ir import MATRIX_OPS, Graph
from mnrt.compiler.liveness import peak_live_bytes, temporaries, value_nbytes
from mnrt.compiler.node_cost import graph_cost
from mnrt.compiler.options import OPTIONS, OptionError, resolve
from mnrt.compiler.placement import DRAM, ON_CHIP, chain_room, on_chip_bytes
from mnrt.compiler.schedulers import SCHEDULERS, Request, SAOptionError, schedule
from mnrt.compiler.schedulers import anneal as anneal_scheduler
from mnrt.compiler.schedulers import min_memory as min_memory_scheduler

NEW = ("always_from_dram", "reuse_consecutive", "spill_opt", "auto_recompute_sa")


def min_memory(graph):
    return min_memory_scheduler.order(graph)


def anneal(graph, steps):
    return anneal_scheduler.order(graph, steps)


def branches(n: int) -> GraphBuilder:
    """n wide branches built breadth-first, each reduced to a scalar: the built order keeps
    every wide intermediate alive until the reductions start."""
    b = GraphBuilder("branches")
    x = b.input("x", (64, 64), "float")
    wide = [b.exp(b.mul(x, b.param(f"s{i}", np.full(1, i + 1, np.float32)))) for i in range(n)]
    sums = [b.sum(w) for w in wide]
    total = sums[0]
    for s in sums[1:]:
        total = b.add(total, s)
    b.output(total, "y")
    return b


def late_reader(n: int = 1024) -> GraphBuilder:
    """h lives to the end; v = relu(h) is read at once and again after a stretch that needs
    four values on chip. With room for four, v cannot stay on chip across the stretch, but
    recomputing it from h right before its late reader lets everything stay on chip."""
    b = GraphBuilder("late")
    x = b.input("x", (n, n), "float")
    h = b.tanh(x)
    v = b.relu(h)
    a = b.exp(v)
    c = b.add(a, b.neg(a))
    b.output(b.add(b.add(c, v), h), "y")
    return b


def time_of(graph, budget: int = 0) -> float:
    """The modelled time of a scheduled graph as compiled: its chains with the room its
    placement leaves them within `budget`."""
    return graph_cost(chain_room(graph, budget)).time_s


def across_chain(n: int, steps: int) -> Graph:
    """h (a gemm's, so that no chain makes it) is read by a chain of `steps` vector kernels
    (softmax and tanh: the intermediates on either side of a softmax are held whole) and
    again after it (by a gemm, which no chain takes in): kept on chip, h saves its own DRAM
    traffic but takes room the chain's intermediates would have had."""
    b = GraphBuilder("across")
    x = b.input("x", (n, n), "float")
    h = b.gemm(x, x)
    v = h
    for k in range(steps):
        v = (b.softmax, b.tanh)[k % 2](v)  # a softmax's intermediates are held whole
    b.output(b.gemm(v, h), "y")
    return fuse_chains(b.build())


def placed(graph: Graph, lm) -> Graph:
    g = graph.copy()
    for name, v in g.values.items():
        v.location = ON_CHIP if name in lm else DRAM
    return g


def test_the_registry_holds_all_seven_and_the_option_takes_its_keys():
    assert set(SCHEDULERS) == {*NEW, "in_order", "min_memory", "anneal"}
    assert OPTIONS["scheduler"].choices == tuple(SCHEDULERS)
    assert resolve({})["scheduler"] == "reuse_consecutive"
    with pytest.raises(OptionError, match="always_from_dram, reuse_consecutive, spill_opt"):
        resolve({"scheduler": "fastest"})


def test_presets_pick_schedulers_of_rising_effort():
    picked = {p: resolve({"option_json": p})["scheduler"] for p in ("O0", "O1", "O2", "O3", "O4")}
    assert picked == {
        "O0": "always_from_dram",
        "O1": "reuse_consecutive",
        "O2": "spill_opt",
        "O3": "spill_opt",
        "O4": "auto_recompute_sa",
    }


def test_always_from_dram_keeps_the_order_and_every_value_in_dram():
    g = branches(3).build()
    done = schedule(g, "always_from_dram", Request())
    assert [n.name for n in done.graph.nodes] == [n.name for n in g.nodes]
    assert all(v.location == DRAM for v in done.graph.values.values())
    assert done.account["spilled_values"] == len(temporaries(g))


def _hand_off() -> GraphBuilder:
    b = GraphBuilder("hand_off")
    x = b.input("x", (16, 16), "float")
    a = b.relu(x)  # read two nodes later: another node's result comes in between
    t = b.tanh(x)  # read by the very next node
    s = b.add(a, t)  # read by the next node
    b.output(b.neg(s), "y")
    return b


def test_reuse_consecutive_keeps_on_chip_what_the_next_node_reads():
    g = _hand_off().build()
    where = {
        n: v.location for n, v in schedule(g, "reuse_consecutive", Request()).graph.values.items()
    }
    assert where == {"x": DRAM, "relu_0": DRAM, "tanh_1": ON_CHIP, "add_2": ON_CHIP, "y": DRAM}
    # Room for one value: tanh_1 (made first) is on chip while add_2 is made, so add_2 spills.
    one = value_nbytes(g, "tanh_1")
    tight = schedule(g, "reuse_consecutive", Request(budget=one)).graph
    assert [tight.values[n].location for n in ("tanh_1", "add_2")] == [ON_CHIP, DRAM]


def test_reuse_consecutive_counts_a_run_of_readers_as_consecutive():
    b = GraphBuilder("run")
    x = b.input("x", (16, 16), "float")
    a = b.relu(x)
    t = b.mul(a, a)  # a is read by this node and the next: a run right after its writer
    b.output(b.add(t, a), "y")
    g = schedule(b.build(), "reuse_consecutive", Request()).graph
    assert g.values["relu_0"].location == ON_CHIP and g.values["mul_1"].location == ON_CHIP


def test_spill_opt_finds_the_cheapest_placement_within_the_budget():
    """Against brute force over every subset of temporaries on a graph small enough for it."""
    g = branches(3).build()
    temps = temporaries(g)
    budget = 2 * value_nbytes(g, "exp_1")
    best = None
    for k in range(len(temps) + 1):
        for lm in itertools.combinations(temps, k):
            trial = g.copy()
            for name, v in trial.values.items():
                v.location = ON_CHIP if name in lm else DRAM
            if max(on_chip_at_each_node(trial)) <= budget:
                best = min(best or np.inf, time_of(trial))
    done = schedule(g, "spill_opt", Request(budget=budget))
    assert done.account["method"] == "exact"
    assert time_of(done.graph) == pytest.approx(best, rel=1e-12)
    assert max(on_chip_at_each_node(done.graph)) <= budget
    consecutive = schedule(g, "reuse_consecutive", Request(budget=budget)).graph
    assert time_of(done.graph) < time_of(consecutive)


@pytest.mark.parametrize(("n", "steps", "room"), [(256, 6, 3.0), (256, 8, 2.5)])
def test_spill_opt_weighs_what_a_value_on_chip_costs_the_chains_beside_it(n, steps, room):
    """Against brute force priced as compiled (chain_room): the choice that would be best if
    chains had the whole chip is slower here, and spill_opt does not take it."""
    g = across_chain(n, steps)
    assert [node.op for node in g.nodes] == ["gemm", "chain", "gemm"]
    temps = temporaries(g)
    budget = int(room * value_nbytes(g, temps[0]))
    subsets = [lm for k in range(len(temps) + 1) for lm in itertools.combinations(temps, k)]
    true = {lm: time_of(placed(g, lm), budget) for lm in subsets}
    blind = min(subsets, key=lambda lm: graph_cost(placed(g, lm)).time_s)
    assert true[blind] > min(true.values())  # the case needs the chains' room weighed
    for scheduler in ("spill_opt", "auto_recompute_sa"):
        done = schedule(g, scheduler, Request(budget=budget, steps=50))
        assert time_of(done.graph, budget) == pytest.approx(min(true.values()), rel=1e-12)
        assert done.account["modelled_time_s"] == pytest.approx(time_of(done.graph, budget))


def test_spill_opt_on_a_large_graph_is_never_worse_than_its_starting_points():
    g = branches(8).build()  # more candidates than the exact search takes
    budget = 3 * value_nbytes(g, "exp_1")
    done = schedule(g, "spill_opt", Request(budget=budget))
    assert done.account["method"] == "greedy + local improvement"
    assert max(on_chip_at_each_node(done.graph)) <= budget
    for other in ("reuse_consecutive", "in_order"):
        assert time_of(done.graph) <= time_of(schedule(g, other, Request(budget=budget)).graph)


def test_auto_recompute_sa_recomputes_a_cheap_value_before_its_late_reader():
    g = late_reader().build()
    budget = 4 * value_nbytes(g, "relu_1")
    spill = schedule(g, "spill_opt", Request(budget=budget))
    sa = schedule(g, "auto_recompute_sa", Request(budget=budget, steps=300))
    assert sa.account["recomputed_nodes"] >= 1
    assert time_of(sa.graph) < time_of(spill.graph)
    assert sa.account["modelled_time_s"] == pytest.approx(time_of(sa.graph))
    assert sa.account["start_time_s"] == pytest.approx(time_of(spill.graph))
    copies = [n for n in sa.graph.nodes if ".recompute" in n.name]
    originals = {n.name: n for n in g.nodes}
    for copy in copies:
        original = originals[copy.name.split(".recompute")[0]]
        assert (copy.op, copy.inputs, copy.attrs) == (original.op, original.inputs, original.attrs)
    assert max(on_chip_at_each_node(sa.graph)) <= budget


def test_recomputation_gives_bitwise_the_results_of_the_built_order(ctx, tmp_path):
    builder = late_reader()
    x = np.random.default_rng(3).standard_normal((1024, 1024)).astype(np.float32)
    budget = 4 * 1024 * 1024 * 4
    base = ctx.compile(builder, {"x": x}, options={"scheduler": "in_order"})
    sa = ctx.compile(
        builder,
        {"x": x},
        codegen_dir=tmp_path / "cg",
        options={"scheduler": "auto_recompute_sa", "sram_budget": budget},
    )
    report = json.loads((tmp_path / "cg" / "report.json").read_text())
    account = next(p for p in report["phases"] if p["name"] == "schedule")["account"]
    assert account["scheduler"] == "auto_recompute_sa" and account["recomputed_nodes"] >= 1
    assert report["memory"]["on_chip"]["peak_on_chip_bytes"] <= budget
    np.testing.assert_array_equal(sa({"x": x})["y"].cpu(), base({"x": x})["y"].cpu())
    assert mnrt.replay(tmp_path / "cg" / "model.mnlb").passed


def test_annealing_is_reproducible_whatever_the_threads():
    g = late_reader(256).build()
    budget = 3 * value_nbytes(g, "relu_1")
    one = schedule(g, "auto_recompute_sa", Request(budget=budget, steps=200, threads=1))
    two = [
        schedule(g, "auto_recompute_sa", Request(budget=budget, steps=200, threads=2))
        for _ in range(2)
    ]
    assert two[0].graph.dump() == two[1].graph.dump() and two[0].account == two[1].account
    assert two[0].account["threads"] == 2 and two[0].account["best_seed"] in (0, 1)
    assert time_of(two[0].graph) <= time_of(one.graph)
    if two[0].account["best_seed"] == 0:  # the chain of seed 0 is the one-thread run
        assert two[0].graph.dump() == one.graph.dump()


@pytest.mark.parametrize(
    ("env", "text"),
    [
        ("CODEGEN_SA_STEPS", "many"),
        ("CODEGEN_SA_STEPS", "0"),
        ("CODEGEN_SA_STEPS", "1000000000"),
        ("CODEGEN_NUM_SA_THREADS", "-2"),
        ("CODEGEN_NUM_SA_THREADS", "1.5"),
        ("CODEGEN_NUM_SA_THREADS", "100000"),
    ],
)
def test_bad_annealing_envs_are_errors_naming_the_env_and_the_fix(
    ctx, tmp_path, monkeypatch, env, text
):
    monkeypatch.delenv(env, raising=False)
    opts = tmp_path / "opts.json"
    opts.write_text(json.dumps({"envs": {env: text}, "args": ["--scheduler=auto_recompute_sa"]}))
    x = np.zeros((16, 16), np.float32)
    with pytest.raises(SAOptionError, match=f"{env}='{text}': give a whole number from 1 to"):
        ctx.compile(_hand_off(), {"x": x}, options={"option_json": str(opts)})
    monkeypatch.setenv(env, text)  # the environment, when the option file does not say
    with pytest.raises(mnrt.InvalidArgumentError, match=env):
        ctx.compile(_hand_off(), {"x": x}, options={"scheduler": "auto_recompute_sa"})


def test_codegen_sa_steps_overrides_sa_expected_run_iters(monkeypatch):
    monkeypatch.delenv("CODEGEN_SA_STEPS", raising=False)
    monkeypatch.delenv("CODEGEN_NUM_SA_THREADS", raising=False)
    assert schedulers.request(0, 500, {}).steps == 500
    req = schedulers.request(0, 500, {"CODEGEN_SA_STEPS": "40", "CODEGEN_NUM_SA_THREADS": "3"})
    assert (req.steps, req.threads) == (40, 3)
    done = schedule(_hand_off().build(), "auto_recompute_sa", req)
    assert done.account["steps"] == 40 and done.account["threads"] == 3


@st.composite
def dags(draw):
    """Random DAGs of elementwise ops, joins and GEMMs on one square shape, their runs of
    vector kernels fused into chains or not, with a budget from nothing to more than every
    temporary together."""
    side = draw(st.sampled_from([4, 8, 16]))
    picks = draw(
        st.lists(
            st.tuples(st.integers(0, 5), st.integers(0, 99), st.integers(0, 99)),
            min_size=1,
            max_size=16,
        )
    )
    b = GraphBuilder("dag")
    vals = [b.input("x", (side, side), "float")]
    w = b.param("w", np.eye(side, dtype=np.float32))
    for kind, i, j in picks:
        a, c = vals[i % len(vals)], vals[j % len(vals)]
        make = (b.tanh, b.relu, b.neg, lambda p, q: b.add(p, q), lambda p, q: b.mul(p, q))
        vals.append(b.gemm(a, w) if kind == 5 else make[kind](a, c) if kind >= 3 else make[kind](a))
    b.output(vals[-1], "y")
    if len(vals) > 3:
        b.output(vals[len(vals) // 2], "z")
    graph = b.build()
    if draw(st.booleans()):
        graph = fuse_chains(graph)
    whole = sum(value_nbytes(graph, n) for n in temporaries(graph))
    budget = max(1, int(whole * draw(st.floats(0.0, 1.2))))
    return graph, budget


@settings(max_examples=40, deadline=None)
@given(dags())
def test_every_scheduler_keeps_the_budget_and_the_cost_ordering(case):
    graph, budget = case
    done = {name: schedule(graph, name, Request(budget=budget, steps=60)) for name in SCHEDULERS}
    ops = Counter(n.op for n in graph.nodes)
    for name, result in done.items():
        g = result.graph
        g.verify()  # a topological order: every value defined before it is read
        extra = Counter(n.op for n in g.nodes) - ops
        assert sum(extra.values()) == result.account.get("recomputed_nodes", 0)
        assert not set(extra) & MATRIX_OPS and not ops - Counter(n.op for n in g.nodes)
        assert g.outputs == graph.outputs and max(on_chip_at_each_node(g)) <= budget, name
        for n in (*g.inputs, *g.outputs, *g.params):
            assert g.values[n].location == DRAM
        assert result.account["modelled_time_s"] == pytest.approx(time_of(g, budget), rel=1e-9)
    t = {name: time_of(result.graph, budget) for name, result in done.items()}
    assert t["spill_opt"] <= t["reuse_consecutive"] * (1 + 1e-12)
    assert t["reuse_consecutive"] <= t["always_from_dram"] * (1 + 1e-12)
    assert t["auto_recompute_sa"] <= t["spill_opt"] * (1 + 1e-12)
    assert t["spill_opt"] <= t["in_order"] * (1 + 1e-12)  # greedy placement is a start
    again = schedule(graph, "auto_recompute_sa", Request(budget=budget, steps=60))
    assert again.graph.dump() == done["auto_recompute_sa"].graph.dump()


def test_a_budget_of_zero_is_the_whole_chip():
    assert Request().budget_bytes == on_chip_bytes()
    g = branches(3).build()
    assert schedule(g, "spill_opt", Request()).account["spilled_values"] == 0


def test_min_memory_runs_each_branch_to_its_reduction_before_starting_the_next():
    g = branches(4).build()
    scheduled = min_memory(g)
    assert peak_live_bytes(scheduled) < peak_live_bytes(g) / 2
    ops = [n.op for n in scheduled.nodes]
    assert ops[:3] == ["mul", "exp", "sum"]
    assert sorted(n.op for n in scheduled.nodes) == sorted(n.op for n in g.nodes)


def test_anneal_is_reproducible_and_never_worse_than_its_greedy_start():
    g = branches(5).build()
    a, b = anneal(g, 300), anneal(g, 300)
    assert [n.name for n in a.nodes] == [n.name for n in b.nodes]
    assert peak_live_bytes(a) <= peak_live_bytes(min_memory(g))


@pytest.mark.parametrize("scheduler", ["in_order", "min_memory", "anneal"])
def test_the_order_schedulers_keep_results_and_change_buffer_count(scheduler):
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32) * 0.1
    with mnrt.Context() as ctx:
        base = ctx.compile(branches(4), {"x": x}, options={"scheduler": "in_order"})
        fn = ctx.compile(branches(4), {"x": x}, options={"scheduler": scheduler})
        np.testing.assert_array_equal(fn({"x": x})["y"].cpu(), base({"x": x})["y"].cpu())
        fewer = fn.lowered.distinct_buffers < base.lowered.distinct_buffers
        assert fewer == (scheduler != "in_order")


@pytest.mark.parametrize("scheduler", NEW)
def test_every_scheduler_gives_bitwise_the_results_of_the_built_order(ctx, scheduler):
    x = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32) * 0.1
    budget = 3 * 64 * 64 * 4
    base = ctx.compile(branches(4), {"x": x}, options={"scheduler": "in_order"})
    fn = ctx.compile(branches(4), {"x": x}, options={"scheduler": scheduler, "sram_budget": budget})
    np.testing.assert_array_equal(fn({"x": x})["y"].cpu(), base({"x": x})["y"].cpu())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_min_memory_is_a_topological_order_of_the_same_nodes(picks):
    """Random chains and joins: each schedule verifies (both check that every input is
    defined before it is read) and runs every node once."""
    b = GraphBuilder("random")
    vals = [b.input("x", (8, 8), "float")]
    for p in picks:
        a = vals[p % len(vals)]
        vals.append(b.tanh(a) if p % 2 else b.add(a, vals[-1]))
    b.output(vals[-1], "y")
    g = b.build()
    for scheduled in (min_memory(g), anneal(g, 50)):
        assert sorted(n.op for n in scheduled.nodes) == sorted(n.op for n in g.nodes)
        assert scheduled.outputs == g.outputs
