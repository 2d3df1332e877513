"""The compiler's graph IR: typed values and nodes of device kernels.

A node is a registered kernel (its op name, attributes and operand lists are exactly what
`mnrt.Kernel` takes), so shape and dtype inference is the kernels' own `infer`: the shape
rules live in one place, the kernel registry. Values carry shape, dtype, location and layout;
inputs, parameters (weights, uploaded once) and constants are values with a role.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..device.dtypes import DType
from ..device.dtypes import dtype as resolve_dtype
from ..device.kernels import TensorSpec, lookup, matrix_kernels
from ..device.kernels.shape import run_start
from ..errors import DTypeError, InvalidArgumentError, MnrtError, ShapeError

INPUT, PARAM, TEMP = "input", "param", "temp"

# Ops that copy without computing: where their operands can share a buffer (views.py),
# they run no kernel at all.
ELIDABLE = ("concat", "reshape", "slice")
MATRIX_OPS = matrix_kernels()  # kernels on the matrix unit (MAU), as the registry says


class GraphError(InvalidArgumentError):
    """A graph is malformed: a value used before it is defined, defined twice, unknown..."""


@dataclass
class Value:
    """One tensor of the graph. `data` holds a parameter's contents."""

    name: str
    shape: tuple[int, ...] | None = None
    dtype: DType | None = None
    role: str = TEMP
    location: str = "dram"
    layout: str | None = None
    data: np.ndarray | None = None
    # (root, offset): the value is elements offset... of value root's buffer, no buffer of
    # its own (see views.py)
    view: tuple[str, int] | None = None

    def describe(self) -> str:
        shape = "?" if self.shape is None else "x".join(map(str, self.shape)) or "scalar"
        dtype = "?" if self.dtype is None else self.dtype.name
        layout = f" layout={self.layout}" if self.layout else ""
        view = f" in %{self.view[0]}+{self.view[1]}" if self.view else ""
        return f"%{self.name}: {dtype}[{shape}] @{self.location}{layout}{view}"


@dataclass
class Node:
    """One kernel invocation on named values."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""


@dataclass
class Graph:
    """A dataflow graph in topological order (every value defined before it is used)."""

    name: str
    values: dict[str, Value] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # What compile steps record of their decisions for the codegen_dir (the layout step's
    # plan: layout_plan.json); not part of the program.
    notes: dict[str, Any] = field(default_factory=dict)

    def copy(self, nodes: bool = True) -> Graph:
        """A copy for a pass to transform: its own values, nodes (attributes included) and
        lists, sharing the parameters' data. Passes never change an array in place (one that
        changes a weight gives the value a new array), so copying every weight per pass, as
        a deep copy did (seconds for VGG-19's 548 MB), buys nothing. Without `nodes`, none:
        for a step that makes every node anew (a layout plan, built many times over)."""
        return Graph(
            self.name,
            {name: dataclasses.replace(v) for name, v in self.values.items()},
            [
                Node(n.op, list(n.inputs), list(n.outputs), copy.deepcopy(n.attrs), n.name)
                for n in (self.nodes if nodes else ())
            ],
            list(self.inputs),
            list(self.outputs),
            dict(self.notes),
        )

    @property
    def params(self) -> list[str]:
        return [n for n, v in self.values.items() if v.role == PARAM]

    def unused_name(self, base: str) -> str:
        """`base`, or `base1`, `base2`, ...: the first no value of the graph has, for a value
        a pass adds."""
        name, i = base, 1
        while name in self.values:
            name, i = f"{base}{i}", i + 1
        return name

    def root_of(self, name: str) -> tuple[str, int]:
        """The value whose buffer `name` lies in, and the element it starts at there."""
        view = self.values[name].view
        return (name, 0) if view is None else view

    def elided(self, node: Node) -> bool:
        """Whether the node runs no kernel: a concatenation, reshape or slice whose
        operands lie in one buffer where the op would put them (see views.py): the parts
        one after another from the whole's first element, a reshape where its input is, a
        slice where its run of the input is."""
        if node.op not in ELIDABLE or len(node.outputs) != 1:
            return False
        (out,) = node.outputs
        if all(self.values[n].view is None for n in (*node.inputs, out)):
            return False
        root, at = self.root_of(out)
        if node.op == "concat":
            shape = self.values[out].shape
            if math.prod(shape[: node.attrs.get("axis", 0) % len(shape)]) != 1:
                return False
            for part in node.inputs:
                if self.root_of(part) != (root, at):
                    return False
                at += math.prod(self.values[part].shape)
            return True
        source = self.values[node.inputs[0]].shape
        start = 0 if node.op == "reshape" else run_start(source, node.attrs)
        return start is not None and self.root_of(node.inputs[0]) == (root, at - start)

    def producers(self) -> dict[str, int]:
        """Value name -> index of the node that defines it."""
        return {out: i for i, node in enumerate(self.nodes) for out in node.outputs}

    def last_uses(self) -> dict[str, int]:
        """Value name -> index of the last node that reads it (graph outputs live to the end)."""
        last = {name: i for i, node in enumerate(self.nodes) for name in node.inputs}
        for name in self.outputs:
            last[name] = len(self.nodes)
        return last

    def verify(self) -> None:
        """Check structure and kernels, and infer every value's shape and dtype."""
        defined = {n for n, v in self.values.items() if v.role in (INPUT, PARAM)}
        for name in self.inputs:
            if self.values.get(name) is None or self.values[name].role != INPUT:
                raise GraphError(f"graph '{self.name}': input '{name}' is not an input value")
        for i, node in enumerate(self.nodes):
            where = f"graph '{self.name}' node {i} ({node.name or node.op})"
            for name in node.inputs:
                if name not in defined:
                    raise GraphError(f"{where}: input '{name}' is used before it is defined")
            for name in node.outputs:
                if name in defined:
                    raise GraphError(f"{where}: value '{name}' is defined twice")
                defined.add(name)
                self.values.setdefault(name, Value(name))
            self._infer(node, where)
        for name in self.outputs:
            if name not in defined:
                raise GraphError(f"graph '{self.name}': output '{name}' is never defined")
        self._check_views()

    def _check_views(self) -> None:
        """Every view lies within its root's buffer, a root of its own and of the same
        dtype, and is no value a host reads or writes (a graph read back from a
        codegen_dir may say anything)."""
        for name, v in self.values.items():
            if v.view is None:
                continue
            root, offset = v.view
            r = self.values.get(root)
            if (
                r is None
                or r.view is not None
                or v.role in (INPUT, PARAM)
                or name in self.outputs
                or r.dtype != v.dtype
                or None in (r.shape, v.shape)
                or offset < 0
                or offset + math.prod(v.shape) > math.prod(r.shape)
            ):
                raise GraphError(
                    f"graph '{self.name}': value '{name}' cannot be part of value '{root}' "
                    f"from element {offset}; compile the model again"
                )

    def append(self, node: Node) -> None:
        """Add a node after the others, checking and inferring only it: the graph before it
        is already verified, so building a graph node by node stays linear."""
        where = f"graph '{self.name}' node {len(self.nodes)} ({node.name or node.op})"
        for name in node.inputs:
            if name not in self.values:
                raise GraphError(f"{where}: input '{name}' is not a value of the graph")
        for name in node.outputs:
            if name in self.values:
                raise GraphError(f"{where}: value '{name}' is defined twice")
        for name in node.outputs:
            self.values[name] = Value(name)
        try:
            self._infer(node, where)
        except Exception:
            for name in node.outputs:
                del self.values[name]
            raise
        self.nodes.append(node)

    def _infer(self, node: Node, where: str) -> None:
        try:
            kdef = lookup(node.op)
            node.attrs = kdef.check_attrs(node.attrs)
            kdef.check_arity(len(node.inputs), len(node.outputs))
            specs = [TensorSpec(self.values[n].shape, self.values[n].dtype) for n in node.inputs]
            results = kdef.infer(specs, node.attrs)
            kdef.check_outputs(len(node.outputs), results)
        except (ShapeError, DTypeError) as e:
            raise type(e)(f"{where}: {e}") from None
        except MnrtError as e:
            raise GraphError(f"{where}: {e}") from None
        for name, result in zip(node.outputs, results):
            value = self.values[name]
            if value.dtype is not None and value.dtype not in result.dtypes:
                allowed = " or ".join(d.name for d in result.dtypes)
                raise DTypeError(
                    f"{where}: '{name}' is {value.dtype.name}; the kernel gives {allowed}"
                )
            value.shape = tuple(result.shape)
            value.dtype = value.dtype or result.dtypes[0]

    def dump(self) -> str:
        """A readable listing: inputs, parameters, one node a line, outputs."""
        lines = [f"graph {self.name}"]
        lines += [f"  input {self.values[n].describe()}" for n in self.inputs]
        lines += [f"  param {self.values[n].describe()}" for n in self.params]
        for node in self.nodes:
            outs = ", ".join(self.values[n].describe() for n in node.outputs)
            attrs = ", ".join(f"{k}={v!r}" for k, v in node.attrs.items())
            ins = ", ".join(f"%{n}" for n in node.inputs)
            lines.append(f"  {outs} = {node.op}({ins}){' {' + attrs + '}' if attrs else ''}")
        lines.append("  return " + ", ".join(f"%{n}" for n in self.outputs))
        return "\n".join(lines)


def value(name: str, shape: Any, dtype: Any, role: str, data: np.ndarray | None = None) -> Value:
    """A checked input or parameter value."""
    try:
        dims = tuple(operator.index(d) for d in shape)  # 2.7 is refused, not made 2
    except (TypeError, ValueError):
        raise ShapeError(f"value '{name}': shape must be a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ShapeError(f"value '{name}': shape {dims} has a negative size")
    return Value(name, dims, resolve_dtype(dtype), role, data=data)
