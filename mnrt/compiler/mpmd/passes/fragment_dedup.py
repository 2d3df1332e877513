"""fragment-dedup: a fragment lists each operand and each result once, and returns none
of its operands (a value it only passes through is read where it already is)."""

from __future__ import annotations

from ..ir import Fragment, MpmdProgram

NAME = "fragment-dedup"


def run(program: MpmdProgram) -> MpmdProgram:
    p = program.copy()
    for op in p.ops:
        if isinstance(op, Fragment):
            op.inputs = list(dict.fromkeys(op.inputs))
            operands = set(op.inputs)
            op.outputs = [n for n in dict.fromkeys(op.outputs) if n not in operands]
    return p
