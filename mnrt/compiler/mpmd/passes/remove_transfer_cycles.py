"""remove-transfer-cycles: a transfer that brings a value to a device where it already is
is dropped, and its readers read the value already there.

Following transfers back to the value they started from (x0 on m0 -> x1 on m1 -> x2 on m0
...), the first copy of that value on each device is kept; a later transfer to the same
device (the end of a cycle, or a second transfer of one value to one device) is removed.
All transfers here are device to device, so none is there to save device memory.
"""

from __future__ import annotations

from ..ir import MpmdProgram, Transfer
from ..rewrite import drop_unused_values, replace_uses

NAME = "remove-transfer-cycles"


def run(program: MpmdProgram) -> MpmdProgram:
    p = program.copy()
    where = p.device_of()
    root: dict[str, str] = {}
    held: dict[tuple[str, int], str] = {}  # (original value, device) -> its copy there
    ops = []
    for i, op in enumerate(p.ops):
        if isinstance(op, Transfer):
            start = root.get(op.source, op.source)
            held.setdefault((start, where[start]), start)
            there = held.get((start, op.dst))
            if there is not None:
                replace_uses(p, op.result, there, i + 1)
                continue
            held[(start, op.dst)] = op.result
            root[op.result] = start
        ops.append(op)
    p.ops = ops
    drop_unused_values(p)
    return p
