"""Node order: min_memory keeps fewer temporaries alive than the built order, same results."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler.options import OptionError, resolve
from mnrt.compiler.schedule import anneal, min_memory, peak_live_bytes


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
def test_the_scheduler_option_keeps_results_and_changes_buffer_count(scheduler):
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32) * 0.1
    with mnrt.Context() as ctx:
        base = ctx.compile(branches(4), {"x": x}, options={"scheduler": "in_order"})
        fn = ctx.compile(branches(4), {"x": x}, options={"scheduler": scheduler})
        np.testing.assert_array_equal(fn({"x": x})["y"].cpu(), base({"x": x})["y"].cpu())
        fewer = fn.lowered.distinct_buffers < base.lowered.distinct_buffers
        assert fewer == (scheduler != "in_order")


def test_unknown_scheduler_lists_the_valid_ones():
    with pytest.raises(OptionError, match="in_order, min_memory, anneal"):
        resolve({"scheduler": "fastest"})


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
