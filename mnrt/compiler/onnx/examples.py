"""Example inputs (from_onnx's `inputs`, a compile's call inputs): checked against the
graph inputs the model declares (name, dtype, the dimensions it fixes), and the symbolic
dimensions they fix written into the model for shape inference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ..tensors import as_array
from . import names
from .errors import Unsupported


def examples_of(g: Any, inputs: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """The example inputs as arrays of the dtype each graph input declares (exactly: an
    example that the declared dtype would change is an error, as is a name the model does
    not take as input)."""
    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping):
        raise InvalidArgumentError(
            f"from_onnx's inputs are a dict of input name -> array, not {type(inputs).__name__}"
        )
    declared = {i.name: i for i in g.input if i.name not in {t.name for t in g.initializer}}
    unknown = sorted(repr(n) for n in inputs if n not in declared)
    if unknown:
        raise InvalidArgumentError(
            f"example inputs {', '.join(unknown)} are not inputs of the ONNX model; its inputs "
            f"are {', '.join(declared) or 'none'}"
        )
    examples = {}
    for name, data in inputs.items():
        tt = declared[name].type.tensor_type
        is_tensor = declared[name].type.HasField("tensor_type")
        elem = names.BY_CODE.get(tt.elem_type) if is_tensor else None
        if elem is None or elem.numpy is None or elem.device is None:
            continue  # the input itself is refused (no device dtype) when the model is walked
        array = as_array(name, data, "example input")
        typed = array.astype(elem.numpy)
        if typed.shape != array.shape or not np.array_equal(
            typed, array, equal_nan=array.dtype.kind == "f"
        ):
            raise InvalidArgumentError(
                f"example input '{name}' of dtype {array.dtype} changes when converted to "
                f"{elem.numpy}, the dtype the model declares; pass {elem.numpy} data"
            )
        examples[name] = typed
    return examples


def input_shape(inp: Any, example: np.ndarray | None) -> tuple[int, ...]:
    """A graph input's shape: the model's, with symbolic or missing dimensions taken from
    its example input (which must agree with every dimension the model fixes)."""
    tt = inp.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if example is not None:
        agrees = (
            tt.HasField("shape")
            and len(dims) == example.ndim
            and all(d is None or d == e for d, e in zip(dims, example.shape))
        )
        if tt.HasField("shape") and not agrees:
            raise InvalidArgumentError(
                f"example input '{inp.name}' has shape {example.shape}; the model declares "
                f"{tuple('?' if d is None else d for d in dims)}"
            )
        return tuple(example.shape)
    if not tt.HasField("shape") or None in dims:
        raise Unsupported(
            f"input '{inp.name}' has a symbolic or missing dimension; give a concrete shape "
            "(e.g. with onnx.tools.update_model_dims) or an example input that fixes it "
            f"(ctx.compile(model, inputs), or mnrt compile --input {inp.name}=FILE.npy)"
        )
    return tuple(dims)


def with_example_shapes(model: Any, examples: dict[str, np.ndarray]) -> Any:
    """The model with its inputs' symbolic dimensions set from the example inputs, so that
    shape inference sees what the device will run (a copy, only when there are any)."""
    symbolic = [
        i
        for i in model.graph.input
        if i.name in examples
        and i.type.HasField("tensor_type")
        and any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)
    ]
    if not symbolic:
        return model
    model = type(model).FromString(model.SerializeToString())
    for inp in model.graph.input:
        if inp.name in examples and inp.type.HasField("tensor_type"):
            shape = inp.type.tensor_type.shape
            if len(shape.dim) == examples[inp.name].ndim:
                for d, n in zip(shape.dim, examples[inp.name].shape):
                    if not d.HasField("dim_value"):
                        d.dim_value = int(n)
    return model
