"""Which names a node's outputs depend on by value (what Ctx.note_sources follows to find
the example inputs a value needed at import time is computed from): its inputs, but those
that only give its output a shape, and the names its subgraphs read from the graphs around
them."""

from __future__ import annotations

from typing import Any

# Inputs that give an op's output its shape and nothing else: its values are the other
# inputs' (or an attribute's), so they do not depend on these by value (see
# Ctx.note_sources). AffineGrid's body expands constant indices to the batch its `size`
# gives: those indices are not `size`'s data.
SHAPE_OPERANDS = {"Expand": (1,), "Reshape": (1,), "ConstantOfShape": (0,), "Tile": (1,)}


def value_reads(node: Any) -> list[str]:
    """The names whose values a node's outputs depend on: its inputs but those that only
    shape its output, and what its subgraphs read from the graphs around them."""
    shaping = SHAPE_OPERANDS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
    ins = [n for i, n in enumerate(node.input) if n and i not in shaping]
    return ins + [n for n in _outer_reads(node) if n not in ins]


def _outer_reads(node: Any) -> list[str]:
    """The names a node's subgraphs (If's branches, a Scan's body) read from the graphs
    around them: inputs of the node as much as its listed ones are."""
    found: list[str] = []

    def walk(graph: Any, defined: set[str]) -> None:
        defined = defined | {v.name for v in [*graph.input, *graph.initializer]}
        for inner in graph.node:
            found.extend(n for n in inner.input if n and n not in defined)
            for a in inner.attribute:
                for sub in (*([a.g] if a.HasField("g") else []), *a.graphs):
                    walk(sub, defined)
            defined |= set(inner.output)

    for a in node.attribute:
        for sub in (*([a.g] if a.HasField("g") else []), *a.graphs):
            walk(sub, set())
    return list(dict.fromkeys(found))
