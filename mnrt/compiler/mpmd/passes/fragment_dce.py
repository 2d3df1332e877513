"""fragment-dce: dead MPMD code removed. Walking back from the return: results nobody
reads later, nodes whose results nobody reads, fragments left with no node, transfers
whose result nobody reads, and operands no node reads are dropped."""

from __future__ import annotations

from ..ir import Fragment, MpmdProgram
from ..rewrite import drop_unused_values

NAME = "fragment-dce"


def run(program: MpmdProgram) -> MpmdProgram:
    p = program.copy()
    used = set(p.outputs)
    kept = []
    for op in reversed(p.ops):
        if not isinstance(op, Fragment):
            if op.result in used:
                used.add(op.source)
                kept.append(op)
            continue
        op.outputs = [n for n in op.outputs if n in used]
        live = set(op.outputs)
        nodes = []
        for node in reversed(op.nodes):
            if live & set(node.outputs):
                live.update(node.inputs)
                nodes.append(node)
        op.nodes = nodes[::-1]
        if op.nodes:
            reads = set(op.reads())
            op.inputs = [n for n in op.inputs if n in reads]
            used.update(op.inputs)
            kept.append(op)
    p.ops = kept[::-1]
    drop_unused_values(p)
    return p
