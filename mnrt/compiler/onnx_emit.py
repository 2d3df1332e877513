"""The ONNX graph an exporter writes into (onnx_export, onnx_export_ops), the opset it
writes, and the error it raises where a kernel has no ONNX form."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .ir import Graph

# 18: the first with the Bitwise ops (names.UNARY/BINARY), and with every Reduce op's axes
# an input.
OPSET = 18


class ExportError(InvalidArgumentError):
    """A graph holds kernels that have no ONNX form here."""


class Emitter:
    """The ONNX graph being written: nodes and initializers."""

    def __init__(self, helper: Any, numpy_helper: Any, graph: Graph) -> None:
        self.helper, self.numpy_helper = helper, numpy_helper
        # Shapes and dtypes of the graph's values, and of a chain's intermediates.
        self.shapes = {name: v.shape for name, v in graph.values.items()}
        self.dtypes = {name: v.dtype for name, v in graph.values.items()}
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def const(self, array: np.ndarray) -> str:
        self.count += 1
        name = f"_const{self.count}"
        self.inits.append(self.numpy_helper.from_array(np.asarray(array), name))
        return name

    def temp(self) -> str:
        self.count += 1
        return f"_t{self.count}"

    def add(self, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
        self.nodes.append(self.helper.make_node(op, inputs, outputs, **attrs))


__all__ = ["OPSET", "Emitter", "ExportError"]
