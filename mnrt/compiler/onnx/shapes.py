"""Shape and type inference: what ONNX's own inference finds for the graph's values, used to
refuse oversized constants before they are folded."""

from __future__ import annotations

from typing import Any

from .errors import InvalidModelError


def infer(model: Any) -> Any:
    """The model with ONNX shape inference's value_info added. Inference fails on what the
    model declares (its values' types and shapes, with the example inputs' sizes in its
    symbolic dimensions), so the failure is the model's. Not `check_type`: it calls types
    invalid that are unsupported (a Cast to uint2), and one node's error would hide the
    others that the import lists together."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception as e:
        raise InvalidModelError(
            f"ONNX model '{model.graph.name}' is invalid: ONNX shape inference failed: {e} "
            "(fix the types and shapes the model declares, or the example inputs' shapes; "
            "onnx.checker.check_model(model, full_check=True) explains ONNX's rules)"
        ) from None


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
