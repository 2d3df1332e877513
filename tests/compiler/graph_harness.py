"""A small model for the compiler tests of Context, caching and capture: two GEMM layers
and a softmax, written with the graph builder (no extra needed)."""

from __future__ import annotations

import numpy as np

from mnrt.compiler import GraphBuilder, lower
from mnrt.compiler.liveness import value_nbytes
from mnrt.compiler.placement import ON_CHIP


def run(graph, dev, inputs: dict) -> dict:
    """The graph lowered to a program on `dev` and run once: its outputs by name."""
    low = lower(graph, dev)
    q = dev.command_queue(0)
    for name in graph.params:
        v = graph.values[name]
        q.enqueue_write_buffer(low.bindings[name], v.data.astype(v.dtype.read_dtype))
    for name, data in inputs.items():
        q.enqueue_write_buffer(low.bindings[name], data)
    q.enqueue_program(low.program, low.bindings)
    return {n: q.enqueue_read_buffer(low.bindings[n]) for n in graph.outputs}


def small_mlp(rng: np.random.Generator) -> GraphBuilder:
    """Two GEMM layers and a softmax on a (4, 8) input."""
    b = GraphBuilder("mlp")
    h = b.input("x", (4, 8), "float")
    for i, (fi, fo) in enumerate([(8, 16), (16, 3)]):
        w = b.param(f"w{i}", (rng.standard_normal((fi, fo)) / np.sqrt(fi)).astype(np.float32))
        h = b.gemm(h, w, b.param(f"b{i}", rng.standard_normal(fo).astype(np.float32)))
    b.output(b.softmax(h), "y")
    return b


def mlp_input(seed: int = 0) -> np.ndarray:
    """An input `x` for small_mlp."""
    return np.random.default_rng(seed).standard_normal((4, 8)).astype(np.float32)


def on_chip_at_each_node(graph) -> list[int]:
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
