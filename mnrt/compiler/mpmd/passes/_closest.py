"""Closest consumer and producer fragments, as the merging passes need them."""

from __future__ import annotations

from ..ir import Fragment, MpmdProgram


def closest_consumer(program: MpmdProgram, i: int) -> int | None:
    """Index of the first fragment after ops[i] that reads one of its results."""
    results = set(program.ops[i].outputs)
    return next(
        (
            j
            for j in range(i + 1, len(program.ops))
            if isinstance(program.ops[j], Fragment) and results & set(program.ops[j].inputs)
        ),
        None,
    )


def closest_producer(program: MpmdProgram, i: int) -> int | None:
    """Index of the last fragment before ops[i] whose results it reads."""
    operands = set(program.ops[i].inputs)
    return next(
        (
            j
            for j in range(i - 1, -1, -1)
            if isinstance(program.ops[j], Fragment) and operands & set(program.ops[j].outputs)
        ),
        None,
    )


def same_place(a: Fragment, b: Fragment) -> bool:
    return a.stage == b.stage and a.device == b.device
