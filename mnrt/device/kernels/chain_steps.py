"""The `steps` attribute of a `chain` (device/kernels/chain.py): its JSON parsed and
checked, every hostile value refused with a KernelAttributeError naming the step, and
written canonically, so that equal chains are equal strings."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from ...errors import KernelAttributeError, UnknownKernelError
from .registry import COMMON_ATTRS, Attr, KernelDef, lookup

NAME = "chain"
MAX_STEPS = 64  # a chain is a run of kernels in a model, never thousands of them
MAX_STEPS_CHARS = 1 << 16  # characters of the steps attribute: 64 steps of long attributes
MAX_OPERANDS = 256  # inputs of a chain besides x: a step or two's each, for 64 steps
_STEP_KEYS = {"op", "attrs", "with", "at"}


class Listed(NamedTuple):
    """A step as its attribute lists it (`takes` is its `with`)."""

    op: str
    attrs: Mapping[str, Any]
    at: int
    takes: tuple[int, ...]


def _refuse(why: str) -> KernelAttributeError:
    return KernelAttributeError(f"kernel '{NAME}': attribute 'steps' {why}")


def _step_kernel(op: Any, i: int, operands: int) -> KernelDef:
    """The kernel a step names, which must give one output, take the result before it and
    `operands` more (a matrix kernel's place in a chain is checked by `_check_matrix`)."""
    if not isinstance(op, str):
        raise _refuse(f"step {i}: 'op' must be a kernel name, got {op!r}")
    if op == NAME:
        raise _refuse(f"step {i}: a chain cannot hold a chain; list its steps instead")
    try:
        kdef = lookup(op)
    except UnknownKernelError as e:
        raise _refuse(f"step {i}: {e}") from None
    try:
        kdef.check_arity(1 + operands, 1)
    except KernelAttributeError:
        raise _refuse(
            f"step {i}: kernel '{op}' takes inputs ({', '.join(kdef.inputs)}) and gives "
            f"outputs ({', '.join(kdef.outputs)}); this step gives it {1 + operands} input(s) "
            "(the result before it and the chain inputs its 'with' lists) and takes one output"
        ) from None
    return kdef


def _index(value: Any, i: int, what: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise _refuse(f"step {i}: {what} must be an integer from 0 to {most}, got {value!r:.40}")
    return value


@functools.lru_cache(maxsize=512)
def parse(text: str) -> tuple[Listed, ...]:
    """The steps a chain's attribute lists, each kernel with its checked attributes."""
    if len(text) > MAX_STEPS_CHARS:
        raise _refuse(f"is {len(text)} characters long; at most {MAX_STEPS_CHARS} are allowed")
    try:
        listed = json.loads(text)
    except RecursionError:
        raise _refuse("nests too deeply to be a JSON list of steps") from None
    except ValueError as e:
        raise _refuse(f"is not a JSON list of steps ({e}); see mnrt.kernels()") from None
    if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_STEPS:
        raise _refuse(
            f'must be a JSON list of 1 to {MAX_STEPS} steps {{"op": name, "attrs": {{...}}}}'
        )
    steps = []
    for i, step in enumerate(listed):
        if not isinstance(step, dict) or "op" not in step or set(step) - _STEP_KEYS:
            raise _refuse(
                f'step {i} must be {{"op": name, "attrs": {{...}}, "with": [...], "at": n}} '
                f"(all but op optional), got {step!r:.80}"
            )
        takes = step.get("with", [])
        if not isinstance(takes, list) or len(takes) > MAX_OPERANDS:
            raise _refuse(
                f"step {i}: 'with' must be a list of at most {MAX_OPERANDS} chain inputs, "
                f"got {takes!r:.80}"
            )
        takes = tuple(_index(k, i, "an input of 'with'", MAX_OPERANDS) for k in takes)
        at = _index(step.get("at", 0), i, "'at'", len(takes))
        kdef = _step_kernel(step["op"], i, len(takes))
        attrs = step.get("attrs", {})
        if not isinstance(attrs, dict) or set(attrs) & set(COMMON_ATTRS):
            raise _refuse(
                f"step {i} ({kdef.name}): 'attrs' must be an object of the kernel's own "
                f"attributes ({', '.join(kdef.attrs) or 'none'}), got {attrs!r:.80}"
            )
        wide = [name for name, value in attrs.items() if not _fits_int64(value)]
        if wide:
            raise _refuse(
                f"step {i} ({kdef.name}): attribute {wide[0]!r} holds an integer beyond int64, "
                "which no kernel attribute can hold"
            )
        try:
            checked = kdef.check_attrs(attrs)
        except KernelAttributeError as e:
            raise _refuse(f"step {i}: {e}") from None
        steps.append(Listed(kdef.name, MappingProxyType(checked), at, takes))
    _check_matrix(steps)
    return tuple(steps)


def _check_matrix(steps: Sequence[Listed]) -> None:
    """A chain holds one matrix kernel at most. It takes the result before it (x, for the
    first step) first and then a run of the chain's operands in order; the steps before
    it are its prologue (pointwise, on x as its tiles are loaded, reading x and the
    operands before the matrix kernel's), and the steps after it its epilogue (pointwise,
    reading the operands after the matrix kernel's, a tile of each beside each output
    block, or only rearranging: where the blocks are stored)."""
    at = next((i for i, s in enumerate(steps) if lookup(s.op).matrix), None)
    if at is None:
        return
    head = steps[at]
    first = head.takes[0] if head.takes else 1
    run = tuple(range(first, first + len(head.takes)))
    if head.at or not first or head.takes != run:
        raise _refuse(
            f"step {at} ({head.op}): a matrix kernel in a chain takes the result before it "
            "first and then a run of the chain's operands in order, not x"
        )
    for i, step in enumerate(steps):
        kdef = lookup(step.op)
        if i < at and not (kdef.pointwise and all(k < first for k in step.takes)):
            raise _refuse(
                f"step {i} ({step.op}): the steps before a matrix kernel are its prologue: "
                "pointwise kernels reading x and the chain's operands before the matrix "
                "kernel's own"
            )
        if i > at and (
            kdef.matrix
            or not (kdef.pointwise or kdef.rearranges)
            or any(k < first + len(run) for k in step.takes)
        ):
            raise _refuse(
                f"step {i} ({step.op}): the steps after a matrix kernel are its epilogue: "
                "pointwise kernels taking only the chain's operands after the matrix "
                "kernel's own, and kernels that only rearrange (reshape, transpose); a chain "
                "holds one matrix kernel"
            )


def matrix_step(attrs: Mapping[str, Any]) -> int | None:
    """Where a chain's (checked) attributes put its matrix kernel, or None."""
    return next((i for i, s in enumerate(listed(attrs)) if lookup(s.op).matrix), None)


def _fits_int64(value: Any) -> bool:
    """Whether the integers in an attribute value (a scalar or a list) are int64s, as a
    binary's attributes are: JSON's are unbounded."""
    if isinstance(value, list):
        return all(_fits_int64(v) for v in value)
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def canonical(text: str) -> str:
    """The steps as compact JSON with attributes at their defaults, `at` 0 and an empty
    `with` left out, so that equal chains are equal strings (and binaries, and
    common-subexpression keys)."""
    listed = []
    for op, attrs, at, takes in parse(text):
        kdef = lookup(op)
        given = {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in attrs.items()
            if not _is_default(kdef.attrs[name], value)
        }
        listed.append(
            {
                "op": kdef.name,
                **({"attrs": given} if given else {}),
                **({"with": list(takes)} if takes else {}),
                **({"at": at} if at else {}),
            }
        )
    return dumps(listed)


def _is_default(schema: Attr, value: Any) -> bool:
    return type(schema.default) is type(value) and schema.default == value


def dumps(steps: Sequence[Mapping[str, Any]]) -> str:
    """Steps ({"op": name, "attrs": {...}, "with": [...], "at": n}) as the attribute's
    compact JSON."""
    return json.dumps(list(steps), separators=(",", ":"))


def listed(attrs: Mapping[str, Any]) -> tuple[Listed, ...]:
    """Each step of a chain's (checked) attributes as they list it: (op, checked
    attributes, `at`, the chain inputs its `with` takes)."""
    return parse(attrs["steps"])


def steps_of(attrs: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(op, checked attributes) of each step of a chain's (checked) attributes."""
    return [(p.op, dict(p.attrs)) for p in parse(attrs["steps"])]
