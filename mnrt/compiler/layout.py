"""Layouts in the compiler: the MN-Core notation (device/layout.py, re-exported here),
the layouts the options layout_spec (activations) and gemm_layout_spec (matrix operands)
fix for the values they describe, and report.json's account of them. The layout planners
(compiler/layout_planners/) decide every other value's layout and the switches between.
"""

from __future__ import annotations

from ..device.layout import (
    LEVELS,
    Factor,
    Layout,
    LayoutError,
    fit,
    locate,
    parse,
    switch_level,
    unit_counts,
)
from .ir import MATRIX_OPS, PARAM, Graph

__all__ = [
    "LEVELS",
    "Factor",
    "Layout",
    "LayoutError",
    "fit",
    "fixed_layouts",
    "locate",
    "parse",
    "summary",
    "switch_level",
    "unit_counts",
]


def _matrix_operands(graph: Graph) -> set[str]:
    """Values a gemm or conv2d multiplies (its first two inputs): gemm_layout_spec's."""
    return {name for n in graph.nodes if n.op in MATRIX_OPS for name in n.inputs[:2]}


def _choices(
    graph: Graph, layout_spec: str, gemm_layout_spec: str
) -> dict[str, list[tuple[str, Layout]]]:
    """Value name -> the (option, layout) pairs that apply to it, in order of preference:
    gemm_layout_spec for matrix operands, layout_spec for activations (not parameters)."""
    specs = {
        opt: parse(text, what=f"option {opt}")
        for opt, text in (("gemm_layout_spec", gemm_layout_spec), ("layout_spec", layout_spec))
        if text
    }
    operands = _matrix_operands(graph)
    out: dict[str, list[tuple[str, Layout]]] = {}
    for name, v in graph.values.items():
        wanted = []
        if "gemm_layout_spec" in specs and name in operands:
            wanted.append(("gemm_layout_spec", specs["gemm_layout_spec"]))
        if "layout_spec" in specs and v.role != PARAM:
            wanted.append(("layout_spec", specs["layout_spec"]))
        if wanted:
            out[name] = wanted
    return out


def fixed_layouts(
    graph: Graph, layout_spec: str = "", gemm_layout_spec: str = ""
) -> dict[str, str]:
    """Value name -> the layout the user fixed for it: the first of gemm_layout_spec
    (matrix operands) and layout_spec (activations) that describes its shape. The planners
    keep these as given and switch around them where a kernel needs another."""
    out = {}
    for name, wanted in _choices(graph, layout_spec, gemm_layout_spec).items():
        fitting = [lay for _, lay in wanted if fit(lay, graph.values[name].shape) is None]
        if fitting:
            out[name] = str(fitting[0])
    return out


def summary(graph: Graph, layout_spec: str, gemm_layout_spec: str, shown: int = 10) -> dict:
    """report.json's account of the layouts: how many values have each, and the values a
    spec was meant for but does not fit (the first `shown` of them, with why)."""
    counts: dict[str, int] = {}
    for v in graph.values.values():
        counts[v.layout or "none"] = counts.get(v.layout or "none", 0) + 1
    unfitted = []
    for name, wanted in _choices(graph, layout_spec, gemm_layout_spec).items():
        reasons = [(opt, fit(lay, graph.values[name].shape)) for opt, lay in wanted]
        if all(why is not None for _, why in reasons):
            unfitted += [{"value": name, "option": opt, "why": why} for opt, why in reasons]
    return {
        "layout_spec": layout_spec,
        "gemm_layout_spec": gemm_layout_spec,
        "values_per_layout": counts,
        "unfitted_count": len({u["value"] for u in unfitted}),
        "unfitted": unfitted[:shown],
    }
