"""Review of on-chip placement: placement alone says which operands a kernel keeps in local
memory, and what it keeps there never exceeds sram_budget at any point of the schedule."""

from __future__ import annotations

import numpy as np
import pytest

from mnrt.compiler import GraphBuilder
from mnrt.compiler.models import MODELS
from mnrt.compiler.placement import ON_CHIP, place
from mnrt.compiler.schedule import value_nbytes


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


def _on_chip_bytes_at_each_node(graph) -> list[int]:
    """Bytes on chip while each node runs, from first principles: a value occupies local
    memory from the node that writes it to its last reader."""
    made, last = graph.producers(), graph.last_uses()
    return [
        sum(
            value_nbytes(graph, name)
            for name, v in graph.values.items()
            if v.location == ON_CHIP and made[name] <= i <= last.get(name, made[name])
        )
        for i in range(len(graph.nodes))
    ]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_placement_respects_the_budget_at_every_node(model):
    graph = MODELS[model](seed=1)[0].build()
    full = max(_on_chip_bytes_at_each_node(place(graph, 0)))
    for fraction in (0.1, 0.4, 0.75):
        budget = max(1, int(full * fraction))
        assert max(_on_chip_bytes_at_each_node(place(graph, budget))) <= budget
