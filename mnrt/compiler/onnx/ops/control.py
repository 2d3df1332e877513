"""Control flow the device can run: an If whose condition is known at import time is the
branch it takes, a Scan (whose length is its inputs' static length along the scan axis) is
its body imported once per step, unrolled as the recurrent layers are, and so is a Loop
whose trip count and condition the import knows (each iteration's condition, computed by
the body from its iteration number and constants, decides whether another follows). The
device runs a static graph, so a condition that only a run decides is refused, as any value
an op needs at import time is (an example input may give it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, NoValue, Seq, Unsupported, axis_index
from .common import optional_input

# The most body imports a Scan is unrolled into (steps, times the batch before opset 9):
# each is the body's kernels again, so a long one is better ended before the Scan.
_MAX_STEPS = 4096


def if_(cx: Ctx, node: Any, at: Attrs) -> list:
    cond = np.asarray(cx.const(node.input[0], "If's condition"))
    if cond.size != 1:
        raise Invalid(f"If's condition has {cond.size} elements; it must hold one")
    then_branch, else_branch = at.get("then_branch"), at.get("else_branch")
    from ..graph_import import import_subgraph  # graph_import loads the ops at import

    taken = then_branch if bool(cond.reshape(-1)[0]) else else_branch
    for out in taken.output:
        if out.type.WhichOneof("value") not in ("tensor_type", "sequence_type", "optional_type"):
            raise Unsupported(f"its branch '{taken.name}' gives '{out.name}', a "
                              f"{out.type.WhichOneof('value')}, not a tensor")  # fmt: skip
    outs = import_subgraph(cx, taken, [])
    if len(outs) != len(node.output):
        raise Invalid(f"its branch '{taken.name}' gives {len(outs)} outputs; the If has "
                      f"{len(node.output)}")  # fmt: skip
    return outs


def scan(cx: Ctx, node: Any, at: Attrs) -> list:
    """Scan: the body run once per element of the scan inputs along their scan axes (in
    either direction), its state outputs fed to the next step, its scan outputs stacked.
    Before opset 9 every input has a batch axis first, the scan axis is 1, and the body
    runs per batch element (sequence_lens, if given, must be every sequence's full length)."""
    body = at.get("body")
    m = int(at.get("num_scan_inputs"))
    batched = cx.opset < 9
    names = list(node.input[1:] if batched else node.input)
    n = len(names) - m
    if m < 1 or n < 0:
        raise Invalid(f"num_scan_inputs {m} must be from 1 to the {len(names)} inputs")
    if batched and optional_input(node, 0) is not None:
        lens = np.asarray(cx.const(node.input[0], "sequence_lens")).reshape(-1)
        steps = cx.shape(names[n])[1]
        if lens.size and (lens != steps).any():
            raise Unsupported(f"sequence_lens {lens.tolist()} shorter than the {steps} steps "
                              "of the scan inputs (a static graph runs every step)")  # fmt: skip
    if len(body.input) != n + m or len(body.output) < n:
        raise Invalid(
            f"its body takes {len(body.input)} inputs and gives {len(body.output)} outputs; "
            f"{n} states and {m} scan inputs need {n + m} and at least {n}"
        )
    values = [cx.sym(name) for name in names]
    if not batched:
        return _unrolled(cx, body, at, values[:n], values[n:])
    batch = cx.shape(values[0])[0]
    if any(cx.shape(v)[0] != batch for v in values):
        raise Invalid("the inputs' batch axes (axis 0) differ in length")
    if batch * cx.shape(values[n])[1] > _MAX_STEPS:
        raise Unsupported(f"a scan of {batch} sequences of {cx.shape(values[n])[1]} steps "
                          f"(unrolled, at most {_MAX_STEPS} steps in all)")  # fmt: skip
    per_batch = []
    for b in range(batch):
        elements = [_element(cx, v, 0, b) for v in values]
        per_batch.append(_unrolled(cx, body, at, elements[:n], elements[n:], axis_shift=True))
    return [_stacked(cx, list(outs), 0) for outs in zip(*per_batch)]


def _unrolled(cx: Ctx, body: Any, at: Attrs, states: list[Symbol], xs: list[Symbol],
              axis_shift: bool = False) -> list[Symbol]:  # fmt: skip
    """One sequence's Scan: the final states, then each scan output stacked. Before opset
    9 (`axis_shift`) the scan axis of every input and output is 0 of the batch element's
    (1 of the whole), and only the inputs have directions."""
    from ..graph_import import import_subgraph  # graph_import loads the ops at import

    m, k = len(xs), len(body.output) - len(states)
    in_axes = [0] * m if axis_shift else list(at.get("scan_input_axes") or [0] * m)
    in_dirs = list(at.get("directions" if axis_shift else "scan_input_directions") or [0] * m)
    out_axes = [0] * k if axis_shift else list(at.get("scan_output_axes") or [0] * k)
    out_dirs = [0] * k if axis_shift else list(at.get("scan_output_directions") or [0] * k)
    for what, v, count in (("scan_input_axes", in_axes, m), ("scan_input_directions", in_dirs, m),
                           ("scan_output_axes", out_axes, k),
                           ("scan_output_directions", out_dirs, k)):  # fmt: skip
        if len(v) != count:
            raise Invalid(f"{what} has {len(v)} values; it needs {count}")
    in_axes = [axis_index(a, len(cx.shape(x)), "scan_input_axes") for a, x in zip(in_axes, xs)]
    lengths = {cx.shape(x)[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise Invalid(f"the scan inputs' lengths along their scan axes differ: {sorted(lengths)}")
    (steps,) = lengths
    if steps == 0:
        raise Unsupported("a scan of no steps (its scan outputs would be empty)")
    if steps > _MAX_STEPS:
        raise Unsupported(f"a scan of {steps} steps (unrolled, at most {_MAX_STEPS})")
    stacks: list[list[Symbol]] = [[] for _ in range(k)]
    for t in range(steps):
        picked = [_element(cx, x, a, steps - 1 - t if d else t)
                  for x, a, d in zip(xs, in_axes, in_dirs)]  # fmt: skip
        outs = [o if isinstance(o, Symbol) else cx.param(o, stem="scan_const")
                for o in import_subgraph(cx, body, [*states, *picked])]  # fmt: skip
        states = outs[: len(states)]
        for stack, y in zip(stacks, outs[len(states) :]):
            stack.append(y)
    stacked = []
    for stack, a, d in zip(stacks, out_axes, out_dirs):
        rank = len(cx.shape(stack[0])) + 1
        stacked.append(_stacked(cx, stack[::-1] if d else stack,
                                axis_index(a, rank, "scan_output_axes")))  # fmt: skip
    return [*states, *stacked]


def _element(cx: Ctx, x: Symbol, axis: int, i: int) -> Symbol:
    """Element i of x along `axis`, that axis dropped."""
    shape = cx.shape(x)
    one = cx.op("slice", x, starts=[i], ends=[i + 1], axes=[axis])
    return cx.reshape(one, shape[:axis] + shape[axis + 1 :])


def _stacked(cx: Ctx, parts: list[Symbol], axis: int) -> Symbol:
    """The parts (of one shape) stacked along a new axis `axis`."""
    shape = cx.shape(parts[0])
    if any(cx.shape(p) != shape for p in parts):
        raise Invalid("a scan output's shape changes from step to step")
    grown = [cx.reshape(p, (*shape[:axis], 1, *shape[axis:])) for p in parts]
    return grown[0] if len(grown) == 1 else cx.op("concat", *grown, axis=axis)


def loop(cx: Ctx, node: Any, at: Attrs) -> list:
    """Loop, unrolled: the body imported once per iteration with its iteration number and
    condition as constants, the loop-carried values passed on, the scan outputs stacked.
    The trip count and every iteration's condition must be known at import time (a loop
    that a run's values end is refused); a loop of no iterations too (its scan outputs'
    shapes would be unknown)."""
    from ..graph_import import import_subgraph  # graph_import loads the ops at import

    body = at.get("body")
    trip = optional_input(node, 0)
    limit = None
    if trip is not None:
        counts = cx.ints(trip, "the trip count M")
        if len(counts) != 1:
            raise Invalid(f"the trip count M must hold one value, not {len(counts)}")
        limit = counts[0]
    cond_name = optional_input(node, 1)
    going = True
    if cond_name is not None:
        going = _condition(cx.const(cond_name, "the loop's condition"), "the loop's condition")
    carried: list[Symbol | np.ndarray | Seq | NoValue] = [cx.value(n) for n in node.input[2:]]
    k = len(body.output) - 1 - len(carried)
    if len(body.input) != 2 + len(carried) or k < 0:
        raise Invalid(f"its body takes {len(body.input)} inputs and gives {len(body.output)} "
                      f"outputs for {len(carried)} loop-carried values")  # fmt: skip
    stacks: list[list] = [[] for _ in range(k)]
    i = 0
    while going and (limit is None or i < limit):
        if i == _MAX_STEPS:
            raise Unsupported(f"a loop of more than {_MAX_STEPS} iterations (unrolled)")
        outs = import_subgraph(cx, body, [np.array(i, np.int64), np.array(True), *carried])
        going = _condition(outs[0], "its body's condition (a run's values would end the loop)")
        carried = outs[1 : 1 + len(carried)]
        for stack, y in zip(stacks, outs[1 + len(carried) :]):
            if isinstance(y, (Seq, NoValue)):
                raise Unsupported("a scan output that is a sequence or an optional (a "
                                  "loop-carried one is taken)")  # fmt: skip
            stack.append(y)
        i += 1
    if i == 0 and k:
        raise Unsupported("a loop of no iterations (its scan outputs' shapes are unknown)")
    stacked: list[Symbol | np.ndarray] = []
    for stack in stacks:
        if all(isinstance(y, np.ndarray) for y in stack):
            stacked.append(np.stack(stack))
        else:
            parts = [y if isinstance(y, Symbol) else cx.param(y, stem="loop_const") for y in stack]
            stacked.append(_stacked(cx, parts, 0))
    return [*carried, *stacked]


def _condition(value: Any, what: str) -> bool:
    """A loop condition known at import time, as a bool."""
    if not isinstance(value, np.ndarray):
        raise Unsupported(f"{what} must be known at import time to unroll the loop")
    if value.size != 1:
        raise Invalid(f"{what} has {value.size} elements; it must hold one")
    return bool(value.reshape(-1)[0])
