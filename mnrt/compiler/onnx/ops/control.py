"""Control flow the device can run: an If whose condition is known at import time is the
branch it takes. The device runs a static graph, so a condition that only a run decides
is refused, as any value an op needs at import time is (an example input may give it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..state import Attrs, Ctx, Invalid, Unsupported


def if_(cx: Ctx, node: Any, at: Attrs) -> list:
    cond = np.asarray(cx.const(node.input[0], "If's condition"))
    if cond.size != 1:
        raise Invalid(f"If's condition has {cond.size} elements; it must hold one")
    then_branch, else_branch = at.get("then_branch"), at.get("else_branch")
    from ..graph_import import import_subgraph  # graph_import loads the ops at import

    taken = then_branch if bool(cond.reshape(-1)[0]) else else_branch
    for out in taken.output:
        if not out.type.HasField("tensor_type"):
            raise Unsupported(f"its branch '{taken.name}' gives '{out.name}', a "
                              f"{out.type.WhichOneof('value')}, not a tensor")  # fmt: skip
    outs = import_subgraph(cx, taken, [])
    if len(outs) != len(node.output):
        raise Invalid(f"its branch '{taken.name}' gives {len(outs)} outputs; the If has "
                      f"{len(node.output)}")  # fmt: skip
    return outs
