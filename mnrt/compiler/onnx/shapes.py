"""Shape and type inference: what ONNX's own inference finds for the graph's values, used to
refuse oversized constants before they are folded."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgumentError


def infer(model: Any) -> Any:
    """The model with ONNX shape inference's value_info added."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception as e:
        raise InvalidArgumentError(f"ONNX shape inference failed: {e}") from None


def static_shapes(g: Any) -> dict[str, tuple[tuple[int, ...], int]]:
    """Static shapes and element types ONNX shape inference found for the graph's values."""
    shapes = {}
    for v in [*g.value_info, *g.output]:
        tt = v.type.tensor_type
        dims = tt.shape.dim
        if v.type.HasField("tensor_type") and tt.HasField("shape") and tt.elem_type \
                and all(d.HasField("dim_value") for d in dims):  # fmt: skip
            shapes[v.name] = (tuple(d.dim_value for d in dims), tt.elem_type)
    return shapes
