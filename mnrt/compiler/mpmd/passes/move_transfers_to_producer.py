"""move-transfers-to-producer: every transfer goes right after the op that defines what
it moves (to the start for a function input), so that it no longer sits between fragments
the merging passes would join, and the copy starts as early as the program allows."""

from __future__ import annotations

from ..ir import MpmdProgram, Transfer
from ..rewrite import defines

NAME = "move-transfers-to-producer"


def run(program: MpmdProgram) -> MpmdProgram:
    p = program.copy()
    ops = [op for op in p.ops if not isinstance(op, Transfer)]
    placed: dict[int, int] = {}  # op index in `ops` -> transfers already put after it
    for t in [op for op in p.ops if isinstance(op, Transfer)]:
        at = next((i for i, op in enumerate(ops) if t.source in defines(op)), -1)
        anchor = id(ops[at]) if at >= 0 else 0
        at += 1 + placed.get(anchor, 0)
        placed[anchor] = placed.get(anchor, 0) + 1
        ops.insert(at, t)
    p.ops = ops
    return p
