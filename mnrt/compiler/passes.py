"""Graph passes: small functions from a verified graph to a new verified graph."""

from __future__ import annotations

import copy

from ..device import dtypes as dt
from .ir import PARAM, TEMP, Graph, Node, Value

_FLOATS = {dt.FLOAT, dt.DOUBLE, dt.HALF, dt.FLOAT16}
_MATRIX = {"gemm", "conv2d"}
_PRECISION = {"float": dt.FLOAT, "double": dt.DOUBLE, "half": dt.HALF}


def apply_float_dtype(graph: Graph, mode: str) -> Graph:
    """MLSDK's float_dtype. float|double|half: every floating value in that precision.
    mixed: GEMM and conv operands and results in half (casts inserted around them), the
    rest in float, as the MAU works best in half and accumulates in float."""
    g = copy.deepcopy(graph)
    if mode in _PRECISION:
        target = _PRECISION[mode]
        for v in g.values.values():
            if v.dtype in _FLOATS:
                v.dtype = target
        for node in g.nodes:
            if node.op == "cast" and dt.dtype(node.attrs["to"]) in _FLOATS:
                node.attrs["to"] = target.name
        g.verify()
        return g
    return _mixed(g)


def _mixed(g: Graph) -> Graph:
    nodes: list[Node] = []
    for node in g.nodes:
        if node.op not in _MATRIX or g.values[node.inputs[0]].dtype is not dt.FLOAT:
            nodes.append(node)
            continue
        inputs = []
        for name in node.inputs:
            v = g.values[name]
            if v.role == PARAM:
                v.dtype = dt.HALF  # written once, rounded to half on upload
                inputs.append(name)
            else:
                half = _fresh(g, f"{name}_half", dt.HALF)
                nodes.append(Node("cast", [name], [half], {"to": "half"}, f"{node.name}_in"))
                inputs.append(half)
        out = node.outputs[0]
        result = _fresh(g, f"{out}_half", dt.HALF)
        nodes.append(Node(node.op, inputs, [result], dict(node.attrs), node.name))
        nodes.append(Node("cast", [result], [out], {"to": "float"}, f"{node.name}_out"))
    g.nodes = nodes
    g.verify()
    return g


def _fresh(g: Graph, stem: str, dtype: dt.DType) -> str:
    name, i = stem, 0
    while name in g.values:
        i += 1
        name = f"{stem}{i}"
    g.values[name] = Value(name, dtype=dtype, role=TEMP)
    return name
