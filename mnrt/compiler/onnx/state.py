"""What a converter works with: the import context (builder, the device value or constant
each ONNX name stands for), a node's attributes, and the checks converters share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...device.dtypes import DType
from ...device.spec import MNCORE2
from ..builder import GraphBuilder, Symbol
from . import names
from .errors import ForcedInputRead, Invalid, NeedsExamples, Unsupported

__all__ = ["NO_VALUE", "Attrs", "Converter", "Ctx", "Invalid", "NoValue", "Seq", "Unsupported",
           "axis_index",
           "check_const_size", "const_dtype", "device_array", "device_dtype_name"]  # fmt: skip

# Attributes that change nothing at inference: old opsets' consumed_inputs and is_test
# (inference is all the device does), BatchNormalization's running-average momentum.
_IGNORED_ATTRS = {"consumed_inputs", "is_test", "momentum"}


class Attrs:
    """A node's attributes; records which ones the converter read, so the rest are errors."""

    def __init__(self, node: Any) -> None:
        from onnx import helper

        self.values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.read: set[str] = set()

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        v = self.values.get(name, default)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        return v

    def has(self, name: str) -> bool:
        return name in self.values

    def unread(self) -> list[str]:
        return sorted(set(self.values) - self.read - _IGNORED_ATTRS)


class Seq(tuple):
    """An ONNX sequence, known at import time: its elements in order, each a device value
    (a Symbol) or a constant. The device holds tensors only, so a model's sequences live in
    the import (ops/sequence.py), never in the compiled graph."""


class NoValue:
    """An empty ONNX optional, known at import time (ops/optional.py); an optional that
    holds a value is, at import time, that value."""

    __slots__ = ()


NO_VALUE = NoValue()


class Ctx:
    """Import state: the builder, and what each ONNX value name stands for."""

    def __init__(self, name: str, opset: int) -> None:
        self.b = GraphBuilder(name)
        self.opset = opset
        self.syms: dict[str, Symbol] = {}
        self.consts: dict[str, np.ndarray] = {}
        # What the import keeps that the device cannot hold: sequences, empty optionals.
        self.held: dict[str, Seq | NoValue] = {}
        self.opsets: list[Any] = []
        self.inferred: dict[str, tuple[tuple[int, ...], int]] = {}  # ONNX shape inference
        self.types: dict[str, Any] = {}  # ONNX TypeProto of the model's declared values
        self.checker: Any = None  # onnx's CheckerContext for this model's opsets
        # Graph inputs not yet made device inputs: (shape, dtype name, example or None).
        # One becomes a device input when a kernel reads it, or a constant when a converter
        # needs its value and an example input gives it.
        self.pending: dict[str, tuple[tuple[int, ...], str, np.ndarray | None]] = {}
        # For a value that depends on the values of graph inputs with examples and on
        # nothing else the device computes: those inputs (see `note_sources`). `forced`:
        # the inputs taken as constants from the start, since a converter needed such a
        # value at import time (see NeedsExamples).
        self.sources: dict[str, frozenset[str]] = {}
        self.forced: frozenset[str] = frozenset()
        self.may_force = True  # False once forcing was tried and a kernel read a forced input
        self._count = 0

    # --- graph inputs ---------------------------------------------------------------------

    def add_input(self, name: str, shape: tuple[int, ...], dtype: str,
                  example: np.ndarray | None) -> None:  # fmt: skip
        self.pending[name] = (shape, dtype, example)
        if example is not None:
            self.sources[name] = frozenset([name])
            if name in self.forced:
                self.const(name)

    def note_sources(self, inputs: list[str], outputs: list[str]) -> None:
        """After a node is imported: the example inputs its outputs depend on by value.
        Those of its inputs that are constants, or that stand for values the device
        computes from example inputs alone, pass theirs on; an input of a shape-only op
        that stayed a device value (Shape of x) passes nothing when the outputs are
        constants; and an output that also reads any other device value has none."""
        made_consts = all(o in self.consts for o in outputs)
        found: set[str] = set()
        for name in inputs:
            if name in self.sources and (name in self.consts or not made_consts):
                found |= self.sources[name]
            elif name not in self.consts and not made_consts:
                return  # a device value of no example input's making
        if found:
            for o in outputs:
                self.sources[o] = frozenset(found)

    def add_unread_inputs(self) -> None:
        """Inputs that nothing read are still inputs of the graph (a call passes them)."""
        for name in list(self.pending):
            self.sym(name)

    # --- values ---------------------------------------------------------------------------

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, name: str, what: str = "this input") -> np.ndarray:
        """The value of an ONNX name known at import time: an initializer, a folded node,
        or a graph input that an example input gives (which then stops being an input)."""
        if name in self.consts:
            return self.consts[name]
        self._not_held(name)
        example = self.pending[name][2] if name in self.pending else None
        if example is not None:
            del self.pending[name]
            self.consts[name] = example = example.copy()  # the caller's array: ours now
            return example
        if self.sources.get(name) and self.may_force:
            raise NeedsExamples(
                self.sources[name],
                f"{what} ('{name}') must be known at import time, but the model computes it "
                "on the device from its inputs",
            )
        if name in self.syms and self.b.graph.values[self.syms[name]].role == "input":
            raise Unsupported(
                f"{what} ('{name}') must be known at import time, but device kernels read "
                "that graph input too; make it an initializer"
            )
        if name in self.pending:
            raise Unsupported(
                f"{what} ('{name}') must be known at import time: make it an initializer, or "
                "give an example input for it (from_onnx(model, inputs), or mnrt compile "
                f"--input {name}=FILE.npy)"
            )
        raise Unsupported(
            f"{what} ('{name}') must be known at import time, but the model computes it on "
            "the device from its inputs: end the model before this node (a detector's box "
            "selection, say) and run the rest on the host"
        )

    def ints(self, name: str, what: str = "this input") -> list[int]:
        return [int(v) for v in np.asarray(self.const(name, what)).reshape(-1)]

    def fresh(self, stem: str) -> str:
        while True:
            self._count += 1
            name = f"{stem}_{self._count}"
            if not self.b.taken(name):
                return name

    def sym(self, name: str) -> Symbol:
        """The device value for an ONNX name, making a constant a parameter on first use."""
        self._not_held(name)
        if name in self.pending:
            shape, dtype, _ = self.pending.pop(name)
            self.syms[name] = self.b.input(name, shape, dtype)
        if name not in self.syms:
            data = self.const(name)
            if self.forced & self.sources.get(name, frozenset()):
                raise ForcedInputRead(name)
            # Not under a name reserved for an output: a constant that is also an output
            # (an Identity of a weight, read by a Conv and returned) is output as a copy.
            pname = self.fresh(name) if self.b.taken(name) else name
            # Constants are the import's own (initializers read, folded results, copied
            # examples): the graph takes them without a copy (VGG-19: 548 MB, 1.5 s).
            self.syms[name] = self.b.param(
                pname, device_array(data), dtype=const_dtype(data), copy=False
            )
        return self.syms[name]

    def value(self, name: str) -> Symbol | np.ndarray | Seq | NoValue:
        """What an ONNX name stands for where any value may pass (a subgraph's inputs and
        outputs, a loop's carried values): a constant, a sequence or an empty optional as
        itself, anything else as its device value."""
        if name in self.consts:
            return self.consts[name]
        if name in self.held:
            return self.held[name]
        return self.sym(name)

    def seq(self, name: str) -> Seq:
        """The sequence an ONNX name stands for."""
        value = self.held.get(name)
        if not isinstance(value, Seq):
            raise Invalid(f"'{name}' is not a sequence, where the op takes one")
        return value

    def _not_held(self, name: str) -> None:
        value = self.held.get(name)
        if isinstance(value, Seq):
            raise Unsupported(
                f"'{name}' is a sequence (of {len(value)} tensors) where a tensor is read: "
                "sequences are resolved at import time, where the sequence ops (SequenceAt, "
                "ConcatFromSequence, SequenceLength, ...) take them; a graph output, or an op "
                "that reads a whole sequence otherwise, has none on the device, which holds "
                "tensors"
            )
        if value is not None:
            raise Unsupported(
                f"'{name}' is an empty optional where a tensor is read: optionals are "
                "resolved at import time, where OptionalHasElement and OptionalGetElement "
                "take them; a graph output has none on the device, which holds tensors"
            )

    def param(self, data: np.ndarray, like: Symbol | None = None, stem: str = "const") -> Symbol:
        """A new parameter, in the dtype of `like` when given."""
        data = np.asarray(data)
        if like is not None:
            dt = self.dtype(like)
            return self.b.param(self.fresh(stem), data.astype(dt.compute), dtype=dt)
        return self.b.param(self.fresh(stem), device_array(data), dtype=const_dtype(data))

    def shape(self, x: str) -> tuple[int, ...]:
        """The shape of a device value (a Symbol) or of an ONNX name."""
        if isinstance(x, Symbol):
            return tuple(self.b.graph.values[x].shape)
        if x in self.consts:
            return tuple(self.consts[x].shape)
        if x in self.pending:
            return self.pending[x][0]
        return tuple(self.b.graph.values[self.sym(x)].shape)

    def dtype(self, s: Symbol) -> DType:
        return self.b.graph.values[s].dtype

    def dtype_name(self, name: str) -> str:
        """The device dtype of an ONNX name's value, without making it a device value."""
        if name in self.pending:
            return self.pending[name][1]
        if name in self.consts:
            elem = names.BY_NUMPY.get(self.consts[name].dtype.name)
            return device_dtype_name(elem.code if elem else 0, f"'{name}'")
        return self.dtype(self.sym(name)).name

    def op(self, kernel: str, /, *inputs: Symbol, **attrs: Any) -> Symbol:
        return self.b.node(kernel, *inputs, **attrs)

    def reshape(self, s: Symbol, shape: tuple[int, ...]) -> Symbol:
        if tuple(self.b.graph.values[s].shape) == tuple(shape):
            return s
        return self.op("reshape", s, shape=[int(d) for d in shape])


# A converter gets the import context, the node and its attributes, and returns one result
# per ONNX output: a builder Symbol (a device value) or a numpy array (known at import time).
Converter = Callable[[Ctx, Any, Attrs], list]


def device_array(data: np.ndarray) -> np.ndarray:
    """A constant as the device's parameters take it (names.ELEM_TYPES): its own numpy
    dtype, or float32 values for a dtype stored as bit patterns (bfloat16), which the
    upload rounds, exactly, back to it. `const_dtype` names the device dtype."""
    data = np.asarray(data)
    device = const_dtype(data)
    if device.codec is not None:
        return data.astype(np.float32)
    return data


def const_dtype(data: np.ndarray) -> DType:
    """The device dtype that holds a constant of this numpy dtype, or Unsupported."""
    elem = names.BY_NUMPY.get(np.asarray(data).dtype.name)
    device = names.device_dtype(elem.code) if elem is not None else None
    if device is None:
        raise Unsupported(f"a constant of {np.asarray(data).dtype} has no device dtype")
    return device


def device_dtype_name(elem_type: int, what: str) -> str:
    """The device dtype name for an ONNX element type, or Unsupported naming the type."""
    device = names.device_dtype(elem_type)
    if device is None:
        e = names.BY_CODE.get(elem_type)
        name = e.name.lower() if e is not None else f"code {elem_type}"
        raise Unsupported(f"{what}: element type {name} has no device dtype")
    return device.name


def axis_index(axis: int, rank: int, what: str = "axis") -> int:
    """A possibly negative axis as 0..rank-1. Out of range is an error, not wrapped around:
    axis 5 of a rank-3 tensor is a mistake in the model, not axis 2."""
    if not -rank <= axis < rank:
        raise Invalid(f"{what} {axis} is out of range for rank {rank} ({-rank}..{rank - 1})")
    return axis % rank


def check_const_size(shape: tuple[int, ...], itemsize: int, what: str) -> None:
    """Refuse a constant the device could not hold before numpy tries to allocate it: a
    small shape input (ConstantOfShape([2**20, 2**20])) must not cost terabytes of host RAM."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise Invalid(f"{what} has a negative size in its shape {tuple(dims)}")
    nbytes = int(np.prod(dims, dtype=object)) * itemsize
    if nbytes > MNCORE2.dram_bytes:
        raise Invalid(
            f"{what} of shape {tuple(dims)} would take {nbytes} bytes, more than the "
            f"device's {MNCORE2.dram_bytes} bytes of DRAM; check the shape it is made from"
        )
