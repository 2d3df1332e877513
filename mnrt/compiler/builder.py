"""GraphBuilder: write models in Python, without ONNX.

Every registered kernel is a method: `b.gemm(x, w, bias, trans_b=True)` adds a node and
returns its output (a tuple for kernels with several outputs). Shapes are inferred as nodes
are added, so a mistake is reported at the line that makes it.

    b = GraphBuilder("mlp")
    x = b.input("x", (64, 256), "float")
    h = b.relu(b.gemm(x, b.param("w", w), b.param("b", bias)))
    b.output(h, "y")
    graph = b.build()
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..device.dtypes import dtype as resolve_dtype
from ..device.kernels import TensorSpec, lookup
from ..errors import InvalidArgumentError, MnrtError
from .ir import INPUT, PARAM, Graph, GraphError, Node, value


class Symbol(str):
    """A value of the graph being built (its name)."""


class GraphBuilder:
    def __init__(self, name: str = "graph") -> None:
        self.graph = Graph(name)
        self._ids = itertools.count()
        self._reserved: set[str] = set()
        self._scopes: list[str] = []

    def reserve(self, names: Iterable[str]) -> None:
        """Keep generated value names off `names`: ones an importer will give outputs."""
        listed = isinstance(names, Iterable) and not isinstance(names, (str, bytes))
        names = list(names) if listed else None  # a string is one name, not its letters
        if names is None or not all(isinstance(n, str) for n in names):
            raise GraphError(f"reserve takes a list of value names, got {names!r:.60}")
        self._reserved.update(names)

    def taken(self, name: str) -> bool:
        """Whether a new value may not be called `name`: a value has it, or an importer
        reserved it for an output."""
        return name in self.graph.values or name in self._reserved

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Nodes added inside are named `name/<op><index>` (nested scopes join with '/'),
        as ONNX exporters name a module's nodes: what the `stage_assignment` compile option
        matches node-name prefixes against."""
        if not isinstance(name, str) or not name:
            raise GraphError(f"a scope name is a non-empty string, got {name!r}")
        self._scopes.append(name)
        try:
            yield
        finally:
            self._scopes.pop()

    def _fresh(self, stem: str) -> str:
        while True:
            name = f"{stem}{next(self._ids)}"
            if name not in self.graph.values and name not in self._reserved:
                return name

    def _new(self, name: str) -> str:
        if not isinstance(name, str) or not name:
            raise GraphError(f"graph '{self.graph.name}': a value name is a non-empty string, "
                             f"got {name!r}")  # fmt: skip
        if name in self.graph.values:
            raise GraphError(f"graph '{self.graph.name}': value '{name}' already exists")
        return name

    def input(self, name: str, shape: Any, dtype: Any = "float") -> Symbol:
        self.graph.values[self._new(name)] = value(name, shape, dtype, INPUT)
        self.graph.inputs.append(name)
        return Symbol(name)

    def param(self, name: str, data: np.ndarray, dtype: Any = None, copy: bool = True) -> Symbol:
        """A weight: uploaded to the device once and kept there across calls. It is copied,
        so the caller may change its array afterwards; copy=False is for arrays nobody else
        holds (an importer's own), which the graph then owns and never changes."""
        if not isinstance(data, np.ndarray):
            raise InvalidArgumentError(f"param '{name}' takes a numpy array")
        dt = resolve_dtype(dtype if dtype is not None else data.dtype)
        data = data.copy() if copy else data
        self.graph.values[self._new(name)] = value(name, data.shape, dt, PARAM, data=data)
        return Symbol(name)

    def node(self, op: str, *inputs: str, outputs: int | None = None, **attrs: Any) -> Any:
        kdef = lookup(op)
        if outputs is not None and (isinstance(outputs, bool) or not isinstance(outputs, int)):
            raise GraphError(f"{op}: outputs is a count of outputs, got {outputs!r}")
        if outputs is not None and not kdef.required_outputs <= outputs <= len(kdef.outputs):
            # every kernel has a bounded number of outputs (names were made for any count
            # before: outputs=2**70 ran out of memory)
            raise GraphError(
                f"{op} has {len(kdef.outputs)} output(s) ({', '.join(kdef.outputs)}), not {outputs}"
            )
        bad = [n for n in inputs if not isinstance(n, str)]
        if bad:
            raise GraphError(f"{op}: operands are values of this builder, got {bad[0]!r}")
        for name in inputs:
            if name not in self.graph.values:
                raise GraphError(f"{op}: '{name}' is not a value of graph '{self.graph.name}'")
        count = outputs if outputs is not None else self._outputs_made(op, inputs, attrs)
        names = [self._fresh(f"{op}_") for _ in range(count)]
        prefix = "".join(f"{s}/" for s in self._scopes)
        node = Node(op, list(inputs), names, attrs, name=f"{prefix}{op}{len(self.graph.nodes)}")
        self.graph.append(node)
        result = tuple(Symbol(n) for n in names)
        return result[0] if len(result) == 1 else result

    def _outputs_made(self, op: str, inputs: Iterable[str], attrs: dict[str, Any]) -> int:
        """How many outputs the kernel makes with these attributes: its required ones, and
        the optional ones its attributes ask for (a chain's tap)."""
        kdef = lookup(op)
        if kdef.required_outputs == len(kdef.outputs):
            return kdef.required_outputs
        specs = [TensorSpec(self.graph.values[n].shape, self.graph.values[n].dtype) for n in inputs]
        try:
            return len(kdef.infer(specs, kdef.check_attrs(attrs)))
        except MnrtError as e:
            raise GraphError(f"{op}: {e}") from None

    def __getattr__(self, op: str) -> Any:
        if op.startswith("_"):
            raise AttributeError(op)
        lookup(op)  # an unknown kernel raises here, listing the known ones
        return lambda *inputs, **attrs: self.node(op, *inputs, **attrs)

    def output(self, symbol: str, name: str | None = None) -> Symbol:
        """Mark a value as a graph output, renaming it to `name` when given."""
        if not isinstance(symbol, str) or symbol not in self.graph.values:
            raise GraphError(
                f"output {symbol!r} is not a value of graph '{self.graph.name}' (a value of "
                "another builder, or one an earlier output() renamed)"
            )
        if name is not None and not isinstance(name, str):
            raise GraphError(f"output name must be a string, got {name!r}")
        if name is not None and name != symbol and symbol in self.graph.outputs:
            raise GraphError(
                f"{symbol!r} is already output {symbol!r}; a value is one output, under one name"
            )
        if name is not None and name != symbol:
            self._rename(symbol, self._new(name))
            symbol = name
        self.graph.outputs.append(symbol)
        return Symbol(symbol)

    def _rename(self, old: str, new: str, since: int = 0) -> None:
        graph = self.graph
        graph.values[new] = graph.values.pop(old)
        graph.values[new].name = new
        for node in graph.nodes[since:]:
            node.inputs = [new if n == old else n for n in node.inputs]
            node.outputs = [new if n == old else n for n in node.outputs]

    def rename_new(self, old: str, new: str, since: int) -> None:
        """Call value `old`, which only nodes `since` on (in graph order) define or read,
        `new` (a name not `taken`): an importer naming what a node made as its model does."""
        if self.taken(new):
            raise GraphError(f"graph '{self.graph.name}': value '{new}' already exists")
        self._rename(old, new, since)

    def build(self) -> Graph:
        if not self.graph.outputs:
            raise GraphError(f"graph '{self.graph.name}' has no outputs; call output()")
        self.graph.verify()
        return self.graph
