"""ONNX models for the compiler tests, built with onnx.helper. A test that builds one is
skipped when the onnx extra is absent (onnx is imported when a model is built, so a test
module that imports these helpers still runs its other tests without it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def onnx_module() -> Any:
    """The onnx package, or a skip of the calling test without it."""
    return pytest.importorskip("onnx")


def value_info(name: str, shape: list | None, elem: int | None = None) -> Any:
    """A tensor value of `shape` (None: unknown) and element type `elem` (default float)."""
    onnx = onnx_module()
    elem = onnx.TensorProto.FLOAT if elem is None else elem
    return onnx.helper.make_tensor_value_info(name, elem, shape)


def initializer(name: str, array: Any) -> Any:
    return onnx_module().numpy_helper.from_array(np.asarray(array), name)


def onnx_model(nodes: list, inputs: list, outputs: list, inits=(), opset: int = 17) -> Any:
    helper = onnx_module().helper
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def one_node_model(node: Any, inits=(), shape=(2, 3, 4), opset: int = 17) -> Any:
    """A one-node model reading input x of `shape` and writing y."""
    return onnx_model([node], [value_info("x", list(shape))], [value_info("y", None)], inits, opset)


def relu_model(name: str = "x") -> Any:
    """y = Relu(x) on a (2, 3) float input called `name`."""
    relu = onnx_module().helper.make_node("Relu", [name], ["y"])
    return onnx_model([relu], [value_info(name, [2, 3])], [value_info("y", [2, 3])])


def saved_relu_model(path, name: str = "x") -> str:
    """relu_model(name) saved at `path`; returns the path as a string."""
    onnx_module().save(relu_model(name), path)
    return str(path)


def int64s(*values: int) -> np.ndarray:
    return np.array(values, np.int64)
