"""merge-inferred-fragments: what absorbing left, cleaned up.

Until nothing changes: a fragment and its closest consumer in the same stage merge when
either is inferred (the merged one keeps the user fragment's name); an inferred fragment
no fragment reads (its results only go to transfers or the return) merges sideways into
the nearest earlier fragment of its stage (Shardy's merge-sideways), so that a stage is
one fragment. A merge that would make a cycle through another stage is not made.
"""

from __future__ import annotations

from ..ir import Fragment, MpmdProgram
from ..rewrite import merge, until_fixed
from ._closest import closest_consumer, same_place

NAME = "merge-inferred-fragments"


def _merge_once(p: MpmdProgram) -> bool:
    for i, op in enumerate(p.ops):
        if not isinstance(op, Fragment):
            continue
        j = closest_consumer(p, i)
        if j is not None:
            other = p.ops[j]
            if (op.inferred or other.inferred) and same_place(op, other):
                name = other.name if op.inferred and not other.inferred else op.name
                if merge(p, i, j, name):
                    return True
        elif op.inferred:
            for k in range(i - 1, -1, -1):
                other = p.ops[k]
                if isinstance(other, Fragment) and same_place(op, other):
                    if merge(p, k, i, other.name):
                        return True
                    break
    return False


def run(program: MpmdProgram) -> MpmdProgram:
    return until_fixed(program, _merge_once)
