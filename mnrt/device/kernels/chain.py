"""`chain`: several single-input single-output kernels run in order in one launch.

Real compilers fuse such runs (XLA's loop fusion; MN-Core's compiler keeps a producer's
result on chip for its consumer): one launch instead of one per kernel, the intermediates
kept in PE local memory. The steps are the registered kernels themselves, each computed by
its own `compute` and its result rounded to its own dtype exactly as storing it in a buffer
would, so a chain's output is bitwise what the kernels run one by one give.

The steps are one string attribute, a compact JSON list such as
`[{"op":"cast","attrs":{"to":"float"}},{"op":"max_pool2d","attrs":{"kernel":[2,2]}}]`
(attributes at their defaults left out), and `x_dtype` names the chain's input dtype: each
intermediate's shape and dtype then follow from the steps' own shape and dtype rules (the
emulator computes half and float16 in float32, so a step's result could not tell which to
round to otherwise). Both survive a light binary's round trip as any attribute does, and
a hostile value (unknown or nested op, a step of several operands, bad attributes,
mismatched dtypes, too many steps, too large an intermediate) is refused with a
KernelAttributeError, ShapeError or DTypeError before anything runs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from ...errors import (
    DeviceExecutionError,
    DTypeError,
    KernelAttributeError,
    ShapeError,
    UnknownKernelError,
)
from .. import dtypes as dt
from .common import check_temporary
from .registry import (
    COMMON_ATTRS,
    Attr,
    Cost,
    KernelDef,
    Out,
    OutSpec,
    TensorSpec,
    lookup,
    register,
)

NAME = "chain"
MAX_STEPS = 64  # a chain is a run of kernels in a model, never thousands of them
MAX_STEPS_CHARS = 1 << 16  # characters of the steps attribute: 64 steps of long attributes
WHOLE_CHIP = -1  # lm_room of a chain that may use the chip's whole local memory


class Step(NamedTuple):
    """One step of a chain: the kernel, its checked attributes, its input and its output."""

    op: str
    attrs: Mapping[str, Any]
    x: TensorSpec
    y: TensorSpec

    @property
    def kdef(self) -> KernelDef:
        """The registered kernel, looked up when used (never a stale copy)."""
        return lookup(self.op)


def _refuse(why: str) -> KernelAttributeError:
    return KernelAttributeError(f"kernel '{NAME}': attribute 'steps' {why}")


def _step_kernel(op: Any, i: int) -> KernelDef:
    """The kernel a step names, which must take one input and give one output."""
    if not isinstance(op, str):
        raise _refuse(f"step {i}: 'op' must be a kernel name, got {op!r}")
    if op == NAME:
        raise _refuse(f"step {i}: a chain cannot hold a chain; list its steps instead")
    try:
        kdef = lookup(op)
    except UnknownKernelError as e:
        raise _refuse(f"step {i}: {e}") from None
    try:
        kdef.check_arity(1, 1)
    except KernelAttributeError:
        raise _refuse(
            f"step {i}: kernel '{op}' takes inputs ({', '.join(kdef.inputs)}) and gives "
            f"outputs ({', '.join(kdef.outputs)}); a chain's steps take one and give one"
        ) from None
    return kdef


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> tuple[tuple[str, Mapping[str, Any]], ...]:
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
        if not isinstance(step, dict) or "op" not in step or set(step) - {"op", "attrs"}:
            raise _refuse(f'step {i} must be {{"op": name, "attrs": {{...}}}}, got {step!r:.80}')
        kdef = _step_kernel(step["op"], i)
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
        steps.append((kdef.name, MappingProxyType(checked)))
    return tuple(steps)


def _fits_int64(value: Any) -> bool:
    """Whether the integers in an attribute value (a scalar or a list) are int64s, as a
    binary's attributes are: JSON's are unbounded."""
    if isinstance(value, list):
        return all(_fits_int64(v) for v in value)
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def _canonical(text: str) -> str:
    """The steps as compact JSON with attributes at their defaults left out, so that equal
    chains are equal strings (and binaries, and common-subexpression keys)."""
    listed = []
    for op, attrs in _parse(text):
        kdef = lookup(op)
        given = {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in attrs.items()
            if not _is_default(kdef.attrs[name], value)
        }
        listed.append({"op": kdef.name, **({"attrs": given} if given else {})})
    return dumps(listed)


def _is_default(schema: Attr, value: Any) -> bool:
    return type(schema.default) is type(value) and schema.default == value


def dumps(steps: Sequence[Mapping[str, Any]]) -> str:
    """Steps ({"op": name, "attrs": {...}}) as the attribute's compact JSON."""
    return json.dumps(list(steps), separators=(",", ":"))


def plan(attrs: Mapping[str, Any], x: TensorSpec) -> list[Step]:
    """Each step with its input and output spec, derived by the step kernels' own rules from
    the chain's input `x`: what infer checks, cost prices and compute runs."""
    return list(_plan(attrs["steps"], x.shape, x.dtype.name))


@functools.lru_cache(maxsize=512)
def _plan(text: str, shape: tuple[int, ...], x_dtype: str) -> tuple[Step, ...]:
    x = TensorSpec(shape, dt.DTYPES[x_dtype])
    steps = []
    for i, (op, attrs) in enumerate(_parse(text)):
        kdef = lookup(op)
        where = f"kernel '{NAME}' step {i} ({kdef.name})"
        try:
            (out,) = kdef.infer([x], attrs)
        except (ShapeError, DTypeError) as e:
            raise type(e)(f"{where}: {e}") from None
        except KernelAttributeError as e:
            raise KernelAttributeError(f"{where}: {e}") from None
        y = TensorSpec(tuple(out.shape), out.dtypes[0])
        check_temporary(NAME, f"step {i} ({kdef.name})'s result", y.size)
        steps.append(Step(op, attrs, x, y))
        x = y
    return tuple(steps)


def _infer(ins: Sequence[TensorSpec | None], attrs: Mapping[str, Any]) -> list[OutSpec]:
    x = ins[0]
    if x.dtype.name != attrs["x_dtype"]:
        raise DTypeError(
            f"kernel '{NAME}' was made for a {attrs['x_dtype']} input (attribute 'x_dtype'), "
            f"got {x.dtype.name}; compile the chain again for this input"
        )
    last = plan(attrs, x)[-1].y
    return [OutSpec(last.shape, (last.dtype,))]


def _compute(ins: Sequence[np.ndarray | None], attrs: Mapping[str, Any], outs: Sequence[Out]):
    """Each step on the one before's result, rounded to its dtype as a buffer would hold it;
    the last into the chain's own output."""
    x = ins[0]
    steps = _plan(attrs["steps"], tuple(x.shape), attrs["x_dtype"])
    for step in steps[:-1]:
        d, shape = step.y.dtype, step.y.shape
        bits = np.empty(shape, d.storage)
        (result,) = step.kdef.compute([x], step.attrs, [Out(shape, d, bits if d.direct else None)])
        if np.shape(result) != shape:
            raise DeviceExecutionError(
                f"kernel '{step.op}' in a chain produced shape {np.shape(result)} for a "
                f"result of shape {shape} (a kernel bug; please report it)"
            )
        if result is not bits:
            d.store(bits, result)
        x = d.load(bits)
    last = steps[-1]
    return last.kdef.compute([x], last.attrs, outs)


def _cost(ins: Sequence[TensorSpec | None], outs: Sequence[TensorSpec], attrs: Mapping[str, Any]):
    parts = tuple((s.kdef.cost([s.x], [s.y], s.attrs), s.x, s.y) for s in plan(attrs, ins[0]))
    room = attrs.get("lm_room", WHOLE_CHIP)
    return Cost(
        flops=sum(c.flops for c, _, _ in parts),
        dram_bytes=sum(c.dram_bytes for c, _, _ in parts),
        sram_bytes=sum(c.sram_bytes for c, _, _ in parts),
        steps=parts,
        lm_room=None if room == WHOLE_CHIP else float(room),
    )


def _room(value: int) -> int:
    if value < WHOLE_CHIP:
        raise KernelAttributeError(
            f"kernel '{NAME}': attribute 'lm_room' must be a number of bytes, or "
            f"{WHOLE_CHIP} for the chip's whole local memory; got {value}"
        )
    return value


def _reduction(ins: Sequence[TensorSpec | None], attrs: Mapping[str, Any]) -> int:
    from ..tolerance import terms

    return sum(terms(s.kdef, [s.x], s.attrs) for s in plan(attrs, ins[0]))


def _errors(ins, outs, attrs, in_errors) -> list[float]:
    from ..tolerance import kernel_errors

    errors = list(in_errors)
    for s in plan(attrs, ins[0]):
        errors = kernel_errors(s.kdef, [s.x], [s.y], s.attrs, errors)
    return errors


register(
    KernelDef(
        name=NAME,
        doc="a run of one-input one-output kernels in one launch, intermediates kept on chip",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "steps": Attr(
                "str",
                doc='JSON list of the kernels run in order: [{"op": name, "attrs": {...}}, ...]',
                parse=_canonical,
            ),
            "x_dtype": Attr("str", doc="dtype of the input x", choices=tuple(dt.DTYPES)),
            "lm_room": Attr(
                "int",
                WHOLE_CHIP,
                "bytes of PE local memory the intermediates may take: what the program does "
                f"not keep there within its sram_budget ({WHOLE_CHIP}: the chip's whole)",
                parse=_room,
            ),
        },
        infer=_infer,
        compute=_compute,
        cost=_cost,
        reduction=_reduction,
        errors=_errors,
    )
)


def steps_of(attrs: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(op, checked attributes) of each step of a chain's (checked) attributes."""
    return [(op, dict(a)) for op, a in _parse(attrs["steps"])]


__all__ = ["MAX_STEPS", "NAME", "WHOLE_CHIP", "Step", "dumps", "plan", "steps_of"]
