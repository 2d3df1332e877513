"""Rewrites the passes share: merging two fragments, renaming a value's uses, and the
operands and results a fragment needs after its nodes changed."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import PARAM
from .ir import Fragment, MpmdProgram, Op, Transfer


def reads(op: Op) -> list[str]:
    return op.inputs if isinstance(op, Fragment) else [op.source]


def defines(op: Op) -> list[str]:
    return op.outputs if isinstance(op, Fragment) else [op.result]


def until_fixed(program: MpmdProgram, step: Callable[[MpmdProgram], bool]) -> MpmdProgram:
    """A copy of `program` with `step` (one rewrite in place; False when none applied)
    applied until none applies: each rewrite can enable another, so passes that merge one
    pair at a time run to their fixed point."""
    p = program.copy()
    while step(p):
        pass
    return p


def _closure(ops: list[Op], seeds: set[str], forward: bool) -> set[int]:
    """Indices into `ops` that depend on (forward) or feed (backward) the values `seeds`."""
    found: set[int] = set()
    live = set(seeds)
    order = range(len(ops)) if forward else range(len(ops) - 1, -1, -1)
    for i in order:
        ins, outs = set(reads(ops[i])), set(defines(ops[i]))
        if (ins if forward else outs) & live:
            found.add(i)
            live |= outs if forward else ins
    return found


def merge(program: MpmdProgram, first: int, second: int, name: str | None = None) -> bool:
    """Merge fragment ops[second] into ops[first] (first < second), in place, when no op in
    between both depends on the first and feeds the second (that would make a cycle):
    the ops between that depend on the first move after the merged fragment, the rest
    before it. Returns whether it merged. Stage and device are the first's; the origin is
    both origins, deduplicated."""
    a, b = program.ops[first], program.ops[second]
    assert isinstance(a, Fragment) and isinstance(b, Fragment) and first < second
    between = program.ops[first + 1 : second]
    after_a = _closure(between, set(a.defines()), forward=True)
    feeds_b = _closure(between, set(b.inputs), forward=False)
    if after_a & feeds_b:
        return False
    merged = Fragment(
        name or a.name,
        a.stage,
        a.device,
        a.nodes + b.nodes,
        origin=tuple(dict.fromkeys(a.origin + b.origin)),
    )
    before = [op for i, op in enumerate(between) if i not in after_a]
    later = [op for i, op in enumerate(between) if i in after_a]
    program.ops[first : second + 1] = [*before, merged, *later]
    refresh(program)
    return True


def refresh(program: MpmdProgram) -> None:
    """Recompute every fragment's operands (what its nodes read from outside, parameters
    aside) and results (what it defines that a later op or the return reads), keeping the
    order of those it had: after nodes move between fragments."""
    used = set(program.outputs)
    for op in reversed(program.ops):
        if isinstance(op, Fragment):
            own = op.defines()
            outputs = [n for n in op.outputs if n in own and n in used]
            outputs += [n for n in own if n in used and n not in outputs]
            op.outputs = outputs
            reads_now = [n for n in op.reads() if program.values[n].role != PARAM]
            op.inputs = [n for n in op.inputs if n in reads_now]
            op.inputs += [n for n in reads_now if n not in op.inputs]
        used.update(reads(op))


def replace_uses(program: MpmdProgram, old: str, new: str, start: int = 0) -> None:
    """Every read of `old` from op `start` on (and the function's return) reads `new`."""
    for op in program.ops[start:]:
        if isinstance(op, Transfer):
            if op.source == old:
                op.source = new
            continue
        op.inputs = [new if n == old else n for n in op.inputs]
        for node in op.nodes:
            node.inputs = [new if n == old else n for n in node.inputs]
    program.outputs = [new if n == old else n for n in program.outputs]


def drop_unused_values(program: MpmdProgram) -> None:
    """Forget value records nothing defines or reads any more."""
    live = set(program.inputs) | set(program.outputs)
    for op in program.ops:
        live.update(reads(op))
        if isinstance(op, Fragment):
            for node in op.nodes:
                live.update(node.inputs)
                live.update(node.outputs)
        else:
            live.add(op.result)
    for name in [n for n in program.values if n not in live]:
        del program.values[name]
