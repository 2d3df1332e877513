"""`chain`: several kernels run in order in one launch, each on the one before's result.

Real compilers fuse such runs (XLA's loop fusion; MN-Core's compiler keeps a producer's
result on chip for its consumer): one launch instead of one per kernel, the intermediates
kept in PE local memory. The steps are the registered kernels themselves, each computed by
its own `compute` and its result rounded to its own dtype exactly as storing it in a buffer
would, so a chain's output is bitwise what the kernels run one by one give.

Each step gives one output and takes the result before it (the chain's input `x`, for the
first) and, optionally, operands of the chain's own: an inference BatchNormalization is a
`mul` by a per-channel scale and an `add` of a shift, and a residual block ends in an `add`
of the skip connection: runs XLA fuses whole. A step's `with` lists which of the chain's
inputs (0 is `x`, 1 the first of `operands`) it takes besides, in order, and `at` where the
result before it goes among its inputs (0, first, unless said).

A chain may hold one matrix kernel (gemm, conv2d), whose result the steps after it finish
as it leaves the accumulators: a convolution's epilogue (cuDNN's and TensorRT's conv,
bias, residual add, activation) and where its blocks are stored (a transpose: the heads
of attention split as a projection writes them); the steps before it, its prologue, are
applied to its input x as its tiles are loaded (squeeze-excite's channel scaling ahead of
the projection conv). It takes the result before it and a run of the chain's operands in
order; the prologue reads x and the operands before those, the epilogue the operands
after them; both are pointwise and keep the shape, or (after it) only rearrange
(`KernelDef.rearranges`). Such a chain carries the matrix kernel's `mapping` and is priced
as its product with the other steps' flops and operands (device/mapping.py), its result
never crossing DRAM.

A chain may also write one intermediate result out (its `tap`, the index of the step
that makes it) as a second output, `tapped`: XLA's multi-output fusion. A residual
block's result is read by the next block's skip `add` in float and, rounded to half, by
its convolutions: one chain computes it, writes it, and goes on to round it, where two
launches read it back from DRAM.

An input given in a narrower float type than its steps take (a half GEMM result, the
skip connection of an inverted residual block, the x a hardswish reads twice) is widened
as the chain loads it, which is exact: `widen` names the dtype each input (x, then the
operands) is loaded as ('' for as given), so no launch of its own widens it in DRAM first.

The steps are one string attribute, a compact JSON list such as
`[{"op":"cast","attrs":{"to":"float"}},{"op":"mul","with":[1]},{"op":"max_pool2d","attrs":{"kernel":[2,2]}}]`
(attributes at their defaults, `at` 0 and an empty `with` left out), and `x_dtype` and
`operand_dtypes` name the dtypes of the chain's input and operands: each intermediate's
shape and dtype then follow from the steps' own shape and dtype rules (the emulator
computes half and float16 in float32, so a step's result could not tell which to round to
otherwise). Both survive a light binary's round trip as any attribute does, and a hostile
value (unknown or nested op, a second matrix kernel or steps around one that are no
prologue or epilogue, a step of the wrong number of operands or naming an input the chain
does not have, bad attributes, mismatched dtypes, too many steps, too large an
intermediate) is refused with a KernelAttributeError, ShapeError or DTypeError before
anything runs.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ...errors import (
    DeviceExecutionError,
    DTypeError,
    KernelAttributeError,
    MnrtError,
    ShapeError,
)
from .. import dtypes as dt
from .chain_steps import (
    MAX_OPERANDS,
    MAX_STEPS,
    NAME,
    canonical,
    dumps,
    listed,
    matrix_step,
    parse,
    steps_of,
)
from .common import check_temporary
from .registry import (
    Attr,
    Cost,
    KernelDef,
    Out,
    OutSpec,
    Part,
    TensorSpec,
    largest,
    lookup,
    register,
    retarget_result_dtype,
)

WHOLE_CHIP = -1  # lm_room of a chain that may use the chip's whole local memory
NO_TAP = -1  # tap of a chain that writes only its last step's result


class Step(NamedTuple):
    """One step of a chain: the kernel, its checked attributes, its inputs (the result
    before it at position `at`, the chain's inputs `takes` at the others, in order) and its
    output."""

    op: str
    attrs: Mapping[str, Any]
    ins: tuple[TensorSpec, ...]
    at: int
    takes: tuple[int, ...]
    y: TensorSpec

    @property
    def kdef(self) -> KernelDef:
        """The registered kernel, looked up when used (never a stale copy)."""
        return lookup(self.op)

    @property
    def x(self) -> TensorSpec:
        """The result of the step before (the chain's input, for the first)."""
        return self.ins[self.at]

    def inputs(self, x: Any, given: Sequence[Any]) -> list:
        """The step's inputs in order, of anything held per chain input (a spec, an array,
        an error, a value's name): `x` for the result before it, `given[k]` for each chain
        input k it takes."""
        return _arranged(self.at, self.takes, x, given)


def _arranged(at: int, takes: Sequence[int], x: Any, given: Sequence[Any]) -> list:
    others = [given[k] for k in takes]
    return [*others[:at], x, *others[at:]]


def _dtype_names(text: str) -> str:
    names = text.split(",") if text else []
    wrong = [n for n in names if n not in dt.DTYPES]
    if wrong or len(names) > MAX_OPERANDS:
        raise KernelAttributeError(
            f"kernel '{NAME}': attribute 'operand_dtypes' must list at most {MAX_OPERANDS} "
            f"dtypes ({', '.join(dt.DTYPES)}) separated by commas, got {text!r:.80}"
        )
    return text


def _widen_names(text: str) -> str:
    names = text.split(",") if text else []
    wrong = [n for n in names if n and not (n in dt.DTYPES and dt.DTYPES[n].is_float)]
    if wrong or len(names) > 1 + MAX_OPERANDS:
        raise KernelAttributeError(
            f"kernel '{NAME}': attribute 'widen' must list at most {1 + MAX_OPERANDS} float "
            f"dtypes or '' (each input as given) separated by commas, got {text!r:.80}"
        )
    return text


def _loaded(attrs: Mapping[str, Any], ins: Sequence[TensorSpec]) -> list[TensorSpec]:
    """The chain's inputs as its steps see them: each input `widen` names a dtype for
    widened to it, which must hold every value of the input's own (an exact widening)."""
    widen = attrs.get("widen", "")
    if not widen:
        return list(ins)
    names = widen.split(",")
    if len(names) != len(ins):
        raise KernelAttributeError(
            f"kernel '{NAME}': attribute 'widen' lists {len(names)} dtype(s) for "
            f"{len(ins)} input(s) (x and the operands); give one for each ('' for as given)"
        )
    loaded = []
    for k, (t, name) in enumerate(zip(ins, names)):
        if not name:
            loaded.append(t)
            continue
        wide = dt.DTYPES[name]
        if not (t.dtype.is_float and wide.itemsize > t.dtype.itemsize):
            raise DTypeError(
                f"kernel '{NAME}': attribute 'widen' loads input {k} ({t.dtype.name}) as "
                f"{name}, which does not hold every {t.dtype.name} value; widen only to a "
                "larger float type"
            )
        loaded.append(TensorSpec(t.shape, wide))
    return loaded


def plan(attrs: Mapping[str, Any], ins: Sequence[TensorSpec]) -> list[Step]:
    """Each step with its inputs' and output's specs, derived by the step kernels' own rules
    from the chain's inputs `ins` (x, then the operands, widened as `widen` says): what
    infer checks, cost prices and compute runs."""
    return list(_plan(attrs["steps"], tuple((t.shape, t.dtype.name) for t in _loaded(attrs, ins))))


@functools.lru_cache(maxsize=512)
def _plan(text: str, specs: tuple[tuple[tuple[int, ...], str], ...]) -> tuple[Step, ...]:
    given = [TensorSpec(shape, dt.DTYPES[name]) for shape, name in specs]
    x = given[0]
    steps = []
    written = parse(text)
    matrix = any(lookup(s.op).matrix for s in written)
    for i, (op, attrs, at, takes) in enumerate(written):
        kdef = lookup(op)
        where = f"kernel '{NAME}' step {i} ({kdef.name})"
        missing = [k for k in takes if k >= len(given)]
        if missing:
            raise KernelAttributeError(
                f"{where}: takes chain input {missing[0]}, but the chain has {len(given)} "
                "inputs (x and its operands)"
            )
        ins = tuple(_arranged(at, takes, x, given))
        try:
            (out,) = kdef.infer(list(ins), attrs)
        except (ShapeError, DTypeError) as e:
            raise type(e)(f"{where}: {e}") from None
        except KernelAttributeError as e:
            raise KernelAttributeError(f"{where}: {e}") from None
        y = TensorSpec(tuple(out.shape), out.dtypes[0])
        check_temporary(NAME, f"step {i} ({kdef.name})'s result", y.size)
        if matrix and kdef.pointwise and y.shape != x.shape:
            raise ShapeError(
                f"{where}: makes shape {y.shape} of the shape {x.shape} before it, but a "
                "pointwise step of a matrix kernel's prologue or epilogue keeps it"
            )
        steps.append(Step(op, attrs, ins, at, takes, y))
        x = y
    return tuple(steps)


def _tap(attrs: Mapping[str, Any], steps: Sequence[Step]) -> Step | None:
    """The step whose result the chain also writes out (None without a tap)."""
    tap = attrs.get("tap", NO_TAP)
    if tap == NO_TAP:
        return None
    if not 0 <= tap < len(steps) - 1:
        raise KernelAttributeError(
            f"kernel '{NAME}': attribute 'tap' names step {tap}, but a chain of "
            f"{len(steps)} steps can write out the result of steps 0 to {len(steps) - 2} "
            f"(the last step's is its output y), or {NO_TAP} for none"
        )
    return steps[tap]


def _infer(ins: Sequence[TensorSpec | None], attrs: Mapping[str, Any]) -> list[OutSpec]:
    x, operands = ins[0], ins[1:]
    if x.dtype.name != attrs["x_dtype"]:
        raise DTypeError(
            f"kernel '{NAME}' was made for a {attrs['x_dtype']} input (attribute 'x_dtype'), "
            f"got {x.dtype.name}; compile the chain again for this input"
        )
    named = _operand_dtypes(attrs)
    got = [t.dtype.name for t in operands if t is not None]
    if got != named or len(got) != len(operands):
        raise DTypeError(
            f"kernel '{NAME}' was made for operands of dtypes [{', '.join(named)}] (attribute "
            f"'operand_dtypes'), got [{', '.join(got)}]; compile the chain again for them"
        )
    steps = plan(attrs, ins)
    tap = _tap(attrs, steps)
    made = [steps[-1].y] if tap is None else [steps[-1].y, tap.y]
    return [OutSpec(y.shape, (y.dtype,)) for y in made]


def _compute(ins: Sequence[np.ndarray | None], attrs: Mapping[str, Any], outs: Sequence[Out]):
    """Each step on the one before's result (and the operands it takes), rounded to its
    dtype as a buffer would hold it; the last into the chain's own output, and the tapped
    step's result (those bits, widened as a buffer's are) into the second."""
    x = ins[0]
    given = [TensorSpec(tuple(x.shape), dt.DTYPES[attrs["x_dtype"]])] + [
        TensorSpec(tuple(a.shape), dt.DTYPES[d]) for a, d in zip(ins[1:], _operand_dtypes(attrs))
    ]
    loaded = _loaded(attrs, given)
    ins = [a if t is w else np.asarray(a, w.dtype.compute) for a, t, w in zip(ins, given, loaded)]
    steps = _plan(attrs["steps"], tuple((t.shape, t.dtype.name) for t in loaded))
    tap = _tap(attrs, steps)
    tapped = None
    for step in steps[:-1]:
        d, shape = step.y.dtype, step.y.shape
        bits = np.empty(shape, d.storage)
        target = [Out(shape, d, bits if d.direct else None)]
        (result,) = step.kdef.compute(step.inputs(x, ins), step.attrs, target)
        if np.shape(result) != shape:
            raise DeviceExecutionError(
                f"kernel '{step.op}' in a chain produced shape {np.shape(result)} for a "
                f"result of shape {shape} (a kernel bug; please report it)"
            )
        if result is not bits:
            d.store(bits, result)
        x = d.load(bits)
        if step is tap:
            tapped = x
    last = steps[-1]
    (y,) = last.kdef.compute(last.inputs(x, ins), last.attrs, outs[:1])
    return [y] if tapped is None else [y, tapped]


def retargeted(attrs: Mapping[str, Any], ins: Sequence[TensorSpec], target: dt.DType,
               floats: Collection[dt.DType]) -> dict[str, Any]:  # fmt: skip
    """A chain's attributes made for inputs `ins` where every value of one of `floats` is
    `target`: each step that makes one (a cast's `to`) makes `target`, and nothing is
    widened as it loads, since no float is narrower than another."""
    steps = json.loads(attrs["steps"])
    for step in steps:
        retarget_result_dtype(step.get("attrs", {}), target, floats)
    return {
        **attrs,
        "steps": dumps(steps),
        "x_dtype": ins[0].dtype.name,
        "operand_dtypes": ",".join(t.dtype.name for t in ins[1:]),
        "widen": "",
    }


def _operand_dtypes(attrs: Mapping[str, Any]) -> list[str]:
    return attrs["operand_dtypes"].split(",") if attrs["operand_dtypes"] else []


def _step_cost(
    step: Step, first: bool, given: Sequence[TensorSpec], loaded: Sequence[TensorSpec]
) -> Cost:
    """A step's cost, reading each input the chain widens as it loads it in the input's own
    dtype (its bytes from DRAM), plus the widening's one flop an element. The first step
    reads x where the others read the result before them."""
    others = [j for j in range(len(step.ins)) if j != step.at]
    reads = list(zip(others, step.takes)) + ([(step.at, 0)] if first else [])
    narrow = {j: given[k] for j, k in reads if loaded[k] is not given[k]}
    if not narrow:
        return step.kdef.cost(list(step.ins), [step.y], step.attrs)
    read = [narrow.get(j, t) for j, t in enumerate(step.ins)]
    cost = step.kdef.cost(read, [step.y], step.attrs)
    traffic = cost.traffic or tuple(float(t.nbytes) for t in [*read, step.y])
    widening = sum(t.size for t in narrow.values())
    return dataclasses.replace(cost, traffic=traffic, flops=cost.flops + widening)


def _cost(ins: Sequence[TensorSpec | None], outs: Sequence[TensorSpec], attrs: Mapping[str, Any]):
    steps = plan(attrs, ins)
    tap = _tap(attrs, steps)
    loaded = _loaded(attrs, ins)
    parts = tuple(
        Part(
            _step_cost(s, i == 0, ins, loaded),
            s.ins,
            s.at,
            s.takes,
            s.y,
            s.kdef.pointwise,
            s is tap,
        )
        for i, s in enumerate(steps)
    )
    room = attrs.get("lm_room", WHOLE_CHIP)
    return Cost(
        flops=sum(p.cost.flops for p in parts),
        dram_bytes=sum(p.cost.dram_bytes for p in parts),
        sram_bytes=sum(p.cost.sram_bytes for p in parts),
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

    return sum(terms(s.kdef, list(s.ins), s.attrs) for s in plan(attrs, ins))


def _terms(scales: Sequence[float | None], attrs: Mapping[str, Any]) -> float | None:
    """A matrix kernel's terms (its own rule, from the scales of what it reads) or the
    operands its epilogue adds, whichever are larger: what a result that cancels to near
    zero still carries the rounding of. Its x after a prologue is as large as the prologue
    makes x's scale (`_scale_after`). Chains without a matrix kernel do not say."""
    steps, at = listed(attrs), matrix_step(attrs)
    if at is None:
        return None
    x = scales[0]
    for step in steps[:at]:
        x = _scale_after(step, scales, x)
        if x is None:
            return None
    matrix = steps[at]
    own = lookup(matrix.op).term_scale([x, *(scales[k] for k in matrix.takes)], matrix.attrs)
    if own is None:
        return None
    return largest([own, *(scales[k] for step in steps[at + 1 :] for k in step.takes)], attrs)


def _scale_after(step, scales: Sequence[float | None], x: float | None) -> float | None:
    """How large a pointwise step's result is at most, given x's scale and the chain's
    inputs' (`scales`, for the operands it takes): the step itself on them (a sigmoid of
    values near zero is near one half), or the size of its terms where that is larger (a
    difference of two scales is no bound on it); None where a scale or the step's rule is
    missing, or the step cannot run on one value."""
    kdef = lookup(step.op)
    given = _arranged(step.at, step.takes, x, scales)
    if any(s is None for s in given):
        return None
    bound = kdef.term_scale(given, step.attrs)
    try:
        with np.errstate(all="ignore"):
            ins = [np.array([s], np.float64) for s in given]
            (y,) = kdef.compute(ins, step.attrs, [Out((1,), dt.DOUBLE, None)])
        value = float(np.max(np.abs(np.asarray(y, np.float64))))
    except (MnrtError, ArithmeticError, LookupError, TypeError, ValueError):
        return None
    if bound is None or not np.isfinite(value):
        return None
    return max(bound, value)


def _errors(ins, outs, attrs, in_errors) -> list[float]:
    from ..tolerance import kernel_errors

    given = [*in_errors, *[0.0] * len(ins)]  # an input of unstated error: none
    steps = plan(attrs, ins)
    tap = _tap(attrs, steps)
    errors, tapped = [given[0]], []
    for s in steps:
        errors = kernel_errors(s.kdef, list(s.ins), [s.y], s.attrs, s.inputs(errors[0], given))
        if s is tap:
            tapped = errors
    return errors + tapped


register(
    KernelDef(
        name=NAME,
        doc="kernels in one launch, each on the one before's result; intermediates kept on chip",
        inputs=("x", "operands*?"),
        outputs=("y", "tapped?"),
        attrs={
            "steps": Attr(
                "str",
                doc='JSON list of the kernels run in order: [{"op": name, "attrs": {...}, '
                '"with": [chain inputs it takes besides], "at": position of the result '
                "before it among its inputs}, ...]",
                parse=canonical,
            ),
            "x_dtype": Attr("str", doc="dtype of the input x", choices=tuple(dt.DTYPES)),
            "operand_dtypes": Attr(
                "str",
                "",
                "dtypes of the operands, in order, separated by commas (none: '')",
                parse=_dtype_names,
            ),
            "widen": Attr(
                "str",
                "",
                "dtypes the inputs (x, then the operands) are widened to as the chain loads "
                "them, separated by commas ('' each: as given; none: '')",
                parse=_widen_names,
            ),
            "tap": Attr(
                "int",
                NO_TAP,
                "index of the step whose result the chain also writes as its second output, "
                f"tapped ({NO_TAP}: none)",
            ),
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
        terms=_terms,
    )
)


__all__ = [
    "MAX_OPERANDS",
    "MAX_STEPS",
    "NAME",
    "NO_TAP",
    "WHOLE_CHIP",
    "Step",
    "dumps",
    "listed",
    "matrix_step",
    "plan",
    "retargeted",
    "steps_of",
]
