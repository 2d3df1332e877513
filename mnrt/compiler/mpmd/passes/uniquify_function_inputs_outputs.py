"""uniquify-function-inputs-outputs: every value the function returns is its own.

A value returned twice, or a function input returned as is, gets a `copy` in an inferred
fragment on the device where it lives (at the stage of the fragment that makes it, or of
the first fragment on the input's device), so that each result has a buffer of its own
and a caller changing one result never changes another or the input it passed.
"""

from __future__ import annotations

from ...ir import Node, Value
from ..ir import Fragment, MpmdProgram

NAME = "uniquify-function-inputs-outputs"


def run(program: MpmdProgram) -> MpmdProgram:
    p = program.copy()
    where = p.device_of()
    stage_of = {n: op.stage for op in p.fragments for n in op.defines()}
    seen: set[str] = set()
    for i, name in enumerate(p.outputs):
        if name in seen or name in p.homes:
            device = where[name]
            stage = stage_of.get(name)
            if stage is None:
                stage = next((f.stage for f in p.fragments if f.device == device), 0)
            copy = p.fresh(f"{name}.out.")
            p.values[copy] = Value(copy, p.values[name].shape, p.values[name].dtype)
            node = Node("copy", [name], [copy], {}, copy)
            p.ops.append(Fragment(p.fresh("unique"), stage, device, [node], [name], [copy]))
            p.outputs[i] = copy
        seen.add(name)
    return p
