"""Kernel and Program: what a device runs, with operand slots bound to buffers at enqueue.

Validation happens once per distinct binding: `Program.plan` checks every slot, infers
every kernel's output shapes from the bound buffers, prices each kernel with the timing
model, binds each kernel to its buffers' memory and caches the result, so enqueueing the
same program on the same buffers again costs a dict lookup. Plans are dropped when a buffer
they use is freed.

Shape inference and pricing depend only on a kernel's operand shapes, dtypes and
attributes, so their results are also kept across programs and devices (`_SIGNATURES`), per
kernel and per whole program: a replay that opens a fresh device every loop validates its
programs at the cost of binding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..device.cost import Modelled
from ..device.emulator import BoundKernel
from ..device.kernels import KernelDef, lookup
from ..device.mapping import MAPPED as MAPPED_KERNELS
from ..device.mapping import Mapping as KernelMapping
from ..errors import (
    BindingError,
    DTypeError,
    InvalidArgumentError,
    KernelAttributeError,
    ShapeError,
)
from ..format.text import bad_name
from .buffer import Buffer

if TYPE_CHECKING:
    from .device import Device

_PLAN_CACHE_LIMIT = 256
_SIGNATURE_CACHE_LIMIT = 4096
# (kernel, input specs, attrs) -> inferred outputs; (that, output specs, device spec) -> cost
_SIGNATURES: dict[tuple, Any] = {}


def _memo(key: tuple, compute: Any, *args: Any) -> Any:
    """compute(*args), remembered under `key` (computed afresh when key cannot be hashed:
    an attribute value that is a list, say). Errors are raised, never remembered."""
    try:
        return _SIGNATURES[key]
    except KeyError:
        pass
    except TypeError:
        return compute(*args)
    value = compute(*args)
    if len(_SIGNATURES) >= _SIGNATURE_CACHE_LIMIT:
        _SIGNATURES.clear()
    _SIGNATURES[key] = value
    return value


@dataclass(frozen=True)
class Kernel:
    """One kernel invocation: an op from `mnrt.kernels()` on named operand slots."""

    op: str
    inputs: Sequence[str] = ()
    outputs: Sequence[str] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kdef = lookup(self.op)
        for role in ("inputs", "outputs"):
            given = getattr(self, role)
            listed = isinstance(given, Iterable) and not isinstance(given, (str, bytes, Mapping))
            slots = tuple(given) if listed else ()
            if not (listed or given is None) or not all(isinstance(s, str) and s for s in slots):
                raise InvalidArgumentError(
                    f"kernel '{self.op}': {role} must be a list of slot names, got {given!r}"
                )
            for s in slots:  # they are stored in light binaries as names (format/text.py)
                problem = bad_name(s)
                if problem:
                    raise InvalidArgumentError(
                        f"kernel '{self.op}': slot name {s[:80]!r} cannot be stored in a light "
                        f"binary: {problem}; use a shorter name of printable characters"
                    )
            object.__setattr__(self, role, slots)
        if self.attrs is not None and not isinstance(self.attrs, Mapping):
            raise KernelAttributeError(
                f"kernel '{self.op}': attrs must be a dict of attribute name -> value, "
                f"got {self.attrs!r}"
            )
        kdef.check_arity(len(self.inputs), len(self.outputs))
        if len(set(self.outputs)) != len(self.outputs):
            raise BindingError(f"kernel '{self.op}' writes slot twice: {self.outputs}")
        object.__setattr__(self, "attrs", kdef.check_attrs(self.attrs))
        onchip = self.attrs.get("onchip", ())
        operands = len(self.inputs) + len(self.outputs)
        if len(set(onchip)) != len(onchip) or not all(0 <= p < operands for p in onchip):
            raise KernelAttributeError(
                f"kernel '{self.op}': attribute 'onchip' lists operand positions 0..."
                f"{operands - 1} (inputs, then outputs), each once; got {onchip}"
            )
        if "mapping" in self.attrs:
            if self.op not in MAPPED_KERNELS:
                raise KernelAttributeError(
                    f"kernel '{self.op}': only {', '.join(MAPPED_KERNELS)} take a 'mapping'; "
                    "drop the attribute"
                )
            try:
                KernelMapping.from_attr(self.attrs["mapping"])
            except ValueError as e:
                raise KernelAttributeError(
                    f"kernel '{self.op}': attribute 'mapping': {e}"
                ) from None

    @property
    def kdef(self) -> KernelDef:
        return lookup(self.op)

    def __hash__(self) -> int:
        # Checked attributes are ints, floats, strs and tuples of them: hashable, unlike the
        # dict that holds them, so equal kernels hash alike and can go in sets and dict keys.
        return hash((self.op, self.inputs, self.outputs, tuple(sorted(self.attrs.items()))))


class Step(NamedTuple):
    """One kernel of a bound program, ready to execute."""

    kdef: KernelDef
    ins: tuple[Buffer, ...]
    outs: tuple[Buffer, ...]
    bound: BoundKernel
    modelled: Modelled


@dataclass
class Plan:
    """A program bound to buffers: its steps, their summed modelled cost, and the bound
    buffers in slot order. `read_first` are the buffers some kernel reads before any kernel
    writes them: the only ones whose fresh memory must hold the device's fill when the
    program runs, since a kernel writes every element of its outputs. `tag` is for an
    observer (what it noted of this binding)."""

    steps: tuple[Step, ...]
    modelled: Modelled
    buffers: tuple[Buffer, ...]
    read_first: tuple[Buffer, ...] = ()
    tag: Any = None

    @classmethod
    def of(cls, steps: Sequence[Step], buffers: tuple[Buffer, ...]) -> Plan:
        costs = [s.modelled for s in steps]
        slowest = max(costs, key=lambda m: m.time_s)
        seen: dict[int, bool] = {}  # buffer uid -> read before written
        for s in steps:
            for b in s.ins:
                seen.setdefault(b.uid, True)
            for b in s.outs:
                seen.setdefault(b.uid, False)
        return cls(
            tuple(steps),
            Modelled(
                time_s=sum(m.time_s for m in costs),
                energy_j=sum(m.energy_j for m in costs),
                flops=sum(m.flops for m in costs),
                dram_bytes=sum(m.dram_bytes for m in costs),
                bound=slowest.bound,
            ),
            buffers,
            tuple(b for b in buffers if seen[b.uid]),
        )

    def release(self) -> None:
        """Let go of the memory its kernels are bound to, once a buffer of it is freed: a
        queue's history keeps the plans of past runs, which must not keep freed memory
        (running the plan afterwards raises UseAfterFreeError)."""
        for step in self.steps:
            step.bound.release()


class _Hashed:
    """A value that hashes once. A program's kernel signature is part of the key of every
    binding it validates, and hashing its nested tuples again each time cost more than the
    rest of that lookup. A value that cannot be hashed raises TypeError when asked, as it
    would have itself (_memo then computes without remembering)."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple) -> None:
        self.value = value
        try:
            self._hash: int | None = hash(value)
        except TypeError:
            self._hash = None

    def __hash__(self) -> int:
        if self._hash is None:
            raise TypeError(f"unhashable signature {self.value!r}")
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _Hashed) and self.value == other.value)


class Program:
    """A validated list of kernels for one device. Create with `Device.create_program`."""

    tag = 0  # an observer's id for this object (see host/observe.py); 0: none

    def __init__(self, device: Device, kernels: Sequence[Kernel], name: str) -> None:
        # Any iterable, taken once: a generator would be empty by the time it is stored.
        if isinstance(kernels, Iterable) and not isinstance(kernels, (Kernel, str, Mapping)):
            kernels = tuple(kernels)
        if not isinstance(kernels, tuple) or not kernels:
            raise InvalidArgumentError(
                f"create_program takes a non-empty list of mnrt.Kernel, got {kernels!r}"
            )
        for i, k in enumerate(kernels):
            if not isinstance(k, Kernel):
                raise InvalidArgumentError(
                    f"create_program: item {i} is {type(k).__name__}, expected mnrt.Kernel"
                )
        self.device = device
        self.name = name
        self.kernels = tuple(kernels)
        seen: dict[str, None] = {}
        for k in self.kernels:
            seen.update(dict.fromkeys(k.inputs + k.outputs))
        self.slots = tuple(seen)
        self._slot_set = frozenset(self.slots)
        self._kdefs = tuple(k.kdef for k in self.kernels)
        self._plans: dict[tuple[int, ...], Plan] = {}
        # What the checks and prices depend on besides the bound buffers' specs.
        self._signature = _Hashed(
            tuple((k.op, k.inputs, k.outputs, tuple(k.attrs.items())) for k in self.kernels)
        )

    def plan(self, bindings: Mapping[str, Buffer]) -> Plan:
        """The program run with `bindings` (slot name -> Buffer), validated once per
        distinct binding and kept: its steps and their modelled time and energy, without
        running it (what an enqueue runs, and what compile reports and benchmarks read)."""
        if not isinstance(bindings, Mapping):
            raise BindingError(
                f"program '{self.name}': bind slots with a dict of slot name -> Buffer"
            )
        try:
            key = tuple(bindings[s].uid for s in self.slots)
        except (KeyError, AttributeError):
            key = None
        plan = self._plans.get(key)
        if plan is None or len(bindings) != len(self.slots):
            plan = self._validate(bindings)
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            self._plans[tuple(bindings[s].uid for s in self.slots)] = plan
        else:
            for buf in bindings.values():
                buf._storage()
        return plan

    def _forget(self, buffer_uid: int | None) -> None:
        """Drop cached plans that use a freed buffer (all plans for None): they hold views
        of its memory."""
        kept = (
            {}
            if buffer_uid is None
            else {k: v for k, v in self._plans.items() if buffer_uid not in k}
        )
        for key, plan in self._plans.items():
            if key not in kept:
                plan.release()
        self._plans = kept

    def _validate(self, bindings: Mapping[str, Buffer]) -> Plan:
        """Check a new binding and bind every kernel to its buffers' memory. A replay loop
        does this for every program on its fresh device, so the common case is kept to
        a few passes over the slots."""
        if bindings.keys() != self._slot_set:
            raise self._refuse_slots(bindings)
        device = self.device
        for slot, buf in bindings.items():
            if not isinstance(buf, Buffer):
                raise BindingError(
                    f"program '{self.name}': slot '{slot}' is bound to "
                    f"{type(buf).__name__}, expected a Buffer"
                )
            if buf.device is not device or not buf._live:
                buf._check_device(device, f"slot '{slot}': ")
        backend = device._backend
        bufs = [bindings[s] for s in self.slots]
        key = (self._signature, tuple([b.spec for b in bufs]), backend.spec)
        prices = _memo(key, self._check_kernels, bindings, backend)
        steps = []
        for k, kdef, modelled in zip(self.kernels, self._kdefs, prices):
            ins = tuple([bindings[s] for s in k.inputs])
            outs = tuple([bindings[s] for s in k.outputs])
            bound = backend.bind(
                kdef,
                k.attrs,
                [(b._storage(), b.dtype) for b in ins],
                [(b._storage(), b.dtype) for b in outs],
            )
            steps.append(Step(kdef, ins, outs, bound, modelled))
        return Plan.of(steps, tuple(bufs))

    def _refuse_slots(self, bindings: Mapping[str, Buffer]) -> BindingError:
        """The error for a binding whose slots are not exactly the program's."""
        unknown = [s for s in bindings if s not in self._slot_set]
        missing = [s for s in self.slots if s not in bindings]
        parts = []
        if missing:
            parts.append(f"unbound slot(s) {', '.join(map(repr, missing))}")
        if unknown:
            parts.append(f"unknown slot(s) {', '.join(map(repr, unknown))}")
        return BindingError(
            f"program '{self.name}': {'; '.join(parts)}; its slots are {', '.join(self.slots)}"
        )

    def _check_kernels(self, bindings: Mapping[str, Buffer], backend: Any) -> tuple:
        """Each kernel's inferred outputs checked against its bound buffers, and its price.
        Depends only on the kernels and the buffers' specs, so a program validated on
        buffers of the same shapes and dtypes (a fresh device every replay loop) is not
        checked again."""
        prices = []
        for i, k in enumerate(self.kernels):
            where = f"program '{self.name}' kernel {i} '{k.op}'"
            ins = tuple(bindings[s] for s in k.inputs)
            outs = tuple(bindings[s] for s in k.outputs)
            in_specs = tuple(b.spec for b in ins)
            signature = (k.op, in_specs, tuple(k.attrs.items()))
            try:
                expected = _memo(signature, k.kdef.infer, list(in_specs), k.attrs)
                k.kdef.check_outputs(len(outs), expected)
            except (ShapeError, DTypeError, KernelAttributeError) as e:
                raise type(e)(f"{where}: {e}") from None
            for slot, buf, want in zip(k.outputs, outs, expected):
                if buf.shape != want.shape:
                    raise ShapeError(
                        f"{where}: output slot '{slot}' is bound to buffer '{buf.name}' of shape "
                        f"{buf.shape}, but the kernel produces {want.shape}"
                    )
                if buf.dtype not in want.dtypes:
                    raise DTypeError(
                        f"{where}: output slot '{slot}' is bound to a {buf.dtype.name} buffer "
                        f"'{buf.name}'; the kernel produces "
                        f"{' or '.join(d.name for d in want.dtypes)} here"
                    )
            out_specs = tuple(b.spec for b in outs)
            modelled = _memo(
                (signature, out_specs, backend.spec),
                backend.kernel_cost,
                k.kdef,
                list(in_specs),
                list(out_specs),
                k.attrs,
            )
            prices.append(modelled)
        return tuple(prices)

    def __repr__(self) -> str:
        return f"Program('{self.name}', {len(self.kernels)} kernels, slots={list(self.slots)})"
