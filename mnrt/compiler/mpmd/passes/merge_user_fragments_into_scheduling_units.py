"""merge-user-fragments-into-scheduling-units: the fragments of one stage become one.

A scheduling unit is what the pipeline schedule runs per microbatch: one fragment per
stage. Until nothing changes, two fragments of the same stage and device merge (the
earlier one's name, both origins) when no op between them both depends on the first and
feeds the second; verify-stage-merging reports a stage where that is impossible.
"""

from __future__ import annotations

from ..ir import Fragment, MpmdProgram
from ..rewrite import merge, until_fixed
from ._closest import same_place

NAME = "merge-user-fragments-into-scheduling-units"


def _merge_once(p: MpmdProgram) -> bool:
    frags = [(i, op) for i, op in enumerate(p.ops) if isinstance(op, Fragment)]
    for n, (i, a) in enumerate(frags):
        for j, b in frags[n + 1 :]:
            if same_place(a, b) and merge(p, i, j):
                return True
    return False


def run(program: MpmdProgram) -> MpmdProgram:
    return until_fixed(program, _merge_once)
