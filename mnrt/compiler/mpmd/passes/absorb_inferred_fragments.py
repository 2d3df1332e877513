"""absorb-inferred-fragments: root fragments absorb the inferred fragments next to them.

A root is a user fragment, a fragment no other fragment reads (only transfers or the
return do), or one that reads no fragment's result (only function inputs and transfers).
Until nothing changes: an inferred producer of a root, in the root's stage, whose closest
consumer is that root, merges into it; and an inferred consumer of a root, in its stage,
whose closest producer is that root, merges into it. The merged fragment keeps the root's
name and origin, so the program keeps the shape the user gave it.
"""

from __future__ import annotations

from ..ir import Fragment, MpmdProgram
from ..rewrite import merge, until_fixed
from ._closest import closest_consumer, closest_producer, same_place

NAME = "absorb-inferred-fragments"


def _roots(p: MpmdProgram) -> list[int]:
    out = []
    for i, op in enumerate(p.ops):
        if not isinstance(op, Fragment):
            continue
        read_by_fragment = closest_consumer(p, i) is not None
        reads_fragment = closest_producer(p, i) is not None
        if not op.inferred or not read_by_fragment or not reads_fragment:
            out.append(i)
    return out


def _absorb_once(p: MpmdProgram) -> bool:
    for r in _roots(p):
        root = p.ops[r]
        for i, op in enumerate(p.ops):
            if not isinstance(op, Fragment) or not op.inferred or i == r:
                continue
            if not same_place(op, root):
                continue
            if i < r and closest_consumer(p, i) == r and merge(p, i, r, root.name):
                return True
            if i > r and closest_producer(p, i) == r and merge(p, r, i, root.name):
                return True
    return False


def run(program: MpmdProgram) -> MpmdProgram:
    return until_fixed(program, _absorb_once)
