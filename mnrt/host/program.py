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

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..device.cost import Modelled
from ..device.emulator import BoundKernel
from ..device.kernels import KernelDef, TensorSpec, lookup
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
from .buffer import Buffer, BufferView

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


class SlotView(NamedTuple):
    """A slot that is part of another slot's buffer rather than a buffer of its own:
    `shape` elements of that buffer's dtype from element `offset` on, row-major. A kernel
    that writes it writes into the buffer: a compiler lays the parts of a concatenation out
    in the buffer of the whole, and a reshape is the buffer it reshapes, so neither copies
    (as XLA and TensorRT elide concatenations and reshapes)."""

    of: str
    offset: int
    shape: tuple[int, ...]


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
            _read_first(steps, buffers),
        )

    def release(self) -> None:
        """Let go of the memory its kernels are bound to, once a buffer of it is freed: a
        queue's history keeps the plans of past runs, which must not keep freed memory
        (running the plan afterwards raises UseAfterFreeError)."""
        for step in self.steps:
            step.bound.release()


def _read_first(steps: Sequence[Step], buffers: tuple[Buffer, ...]) -> tuple[Buffer, ...]:
    """The buffers some kernel reads an element of before any kernel writes it, or that
    the kernels do not write whole. A kernel writes the whole of each output, so without
    views that is "read before written"; a view (see SlotView) is a part of its buffer,
    and parts written one by one (a concatenation's) write it whole once they cover it."""
    written: dict[int, list[tuple[int, int]]] = {}  # buffer uid -> element ranges written
    first: set[int] = set()

    def extent(b: Buffer) -> tuple[int, tuple[int, int]]:
        if isinstance(b, BufferView):
            return b.parent.uid, (b.offset, b.offset + b.spec.size)
        return b.uid, (0, b.spec.size)

    for s in steps:
        for b in s.ins:
            uid, part = extent(b)
            if uid not in first and not _covers(written.get(uid, ()), part):
                first.add(uid)
        for b in s.outs:
            uid, part = extent(b)
            written.setdefault(uid, []).append(part)
    return tuple(
        b
        for b in buffers
        if b.uid in first or not _covers(written.get(b.uid, ()), (0, b.spec.size))
    )


def _covers(ranges: Iterable[tuple[int, int]], part: tuple[int, int]) -> bool:
    """Whether the ranges (start, end) together cover `part`."""
    at, end = part
    for start, stop in sorted(ranges):
        if start > at:
            break
        at = max(at, stop)
    return at >= end


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

    def __init__(
        self,
        device: Device,
        kernels: Sequence[Kernel],
        name: str,
        views: Mapping[str, SlotView] | None = None,
    ) -> None:
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
        self.views = check_views(name, views, self.kernels)
        operands = (s for k in self.kernels for s in k.inputs + k.outputs)
        self.slots = bound_slots(operands, self.views)
        self._slot_set = frozenset(self.slots)
        self._kdefs = tuple(k.kdef for k in self.kernels)
        self._plans: dict[tuple[int, ...], Plan] = {}
        # What the checks and prices depend on besides the bound buffers' specs.
        self._signature = _Hashed(
            (
                tuple((k.op, k.inputs, k.outputs, tuple(k.attrs.items())) for k in self.kernels),
                tuple(self.views.items()),
            )
        )

    def _resolve(self, bindings: Mapping[str, Buffer]) -> Mapping[str, Buffer]:
        """`bindings` with each view bound to its part of its buffer."""
        if not self.views:
            return bindings
        view_specs(f"program '{self.name}'", self.views, {s: b.spec for s, b in bindings.items()})
        bound = dict(bindings)
        for slot, view in self.views.items():
            root, offset = view_root(self.views, slot)
            buf = bindings[root]
            bound[slot] = BufferView(buf, offset, view.shape, f"{buf.name}[{slot}]")
        return bound

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
            if not isinstance(buf, Buffer) or isinstance(buf, BufferView):
                raise BindingError(
                    f"program '{self.name}': slot '{slot}' is bound to "
                    f"{type(buf).__name__}, expected a Buffer"
                )
            if buf.device is not device or not buf._live:
                buf._check_device(device, f"slot '{slot}': ")
        backend = device._backend
        bufs = [bindings[s] for s in self.slots]
        bindings = self._resolve(bindings)
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


def bound_slots(operands: Iterable[str], views: Mapping[str, SlotView]) -> tuple[str, ...]:
    """The slots an enqueue binds to buffers, in order, given the kernels' operands in
    turn: every operand but the views, and the slot each view is part of (where its first
    view is named, unless it is named before)."""
    return tuple(dict.fromkeys(view_root(views, s)[0] for s in operands))


def view_root(views: Mapping[str, SlotView], slot: str) -> tuple[str, int]:
    """The bound slot whose buffer `slot` is (part of), and the element it starts at."""
    offset = 0
    while slot in views:
        view = views[slot]
        slot, offset = view.of, offset + view.offset
    return slot, offset


def view_specs(
    program: str, views: Mapping[str, SlotView], bound: Mapping[str, TensorSpec]
) -> dict[str, TensorSpec]:
    """Each view's spec, given the bound slots' (`bound`); raises ShapeError for a view
    that ends past the end of the buffer it is part of."""
    specs = {}
    for slot, view in views.items():
        root, offset = view_root(views, slot)
        whole = bound[root]
        size, room = math.prod(view.shape), math.prod(whole.shape)
        if offset + size > room:
            raise ShapeError(
                f"{program}: slot '{slot}' is elements {offset}...{offset + size} of slot "
                f"'{root}', bound to a buffer of {room} elements; bind one that holds it"
            )
        specs[slot] = TensorSpec(view.shape, whole.dtype)
    return specs


def check_views(
    program: str, views: Mapping[str, SlotView] | None, kernels: Sequence[Kernel]
) -> dict[str, SlotView]:
    """The views as SlotViews, checked: each names a kernel operand, is part of a slot
    that is no view of it (directly or through others), from a non-negative element, and
    a view of a view lies within it."""
    if not views:
        return {}
    operands = {s for k in kernels for s in (*k.inputs, *k.outputs)}
    if not isinstance(views, Mapping):
        raise InvalidArgumentError(
            f"program '{program}': views must be a dict of slot name -> mnrt.SlotView, "
            f"got {views!r}"
        )
    checked: dict[str, SlotView] = {}
    for slot, view in views.items():
        where = f"program '{program}': view {slot!r}"
        if slot not in operands:
            raise BindingError(f"{where} is no kernel's operand; drop it or use it")
        try:
            of, offset, shape = view
            shape = tuple(shape)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"{where} must be an mnrt.SlotView(of, offset, shape), got {view!r}"
            ) from None
        problem = bad_name(of) if isinstance(of, str) and of else "it is not a slot name"
        if problem:
            raise InvalidArgumentError(f"{where}: cannot be part of {of!r}: {problem}")
        if not _count(offset) or not all(_count(d) for d in shape):
            raise InvalidArgumentError(
                f"{where}: offset and shape must be non-negative ints, got {offset!r}, {shape!r}"
            )
        checked[slot] = SlotView(of, int(offset), tuple(int(d) for d in shape))
    for slot, view in checked.items():
        seen = {slot}
        while view.of in checked:
            if view.of in seen:
                raise BindingError(f"program '{program}': views {sorted(seen)} form a cycle")
            seen.add(view.of)
            outer = checked[view.of]
            if view.offset + math.prod(view.shape) > math.prod(outer.shape):
                raise ShapeError(
                    f"program '{program}': a view ends past the end of view {view.of!r}"
                )
            view = outer
    return checked


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
