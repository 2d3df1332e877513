"""The ONNX vocabulary that the frontend and the exporter share: element type codes and the
ONNX ops that are one device kernel each. One table per fact; both directions derive from it.

Kept free of `import onnx` (the exporter and `mnrt` load it without the onnx extra).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...device import dtypes as dt


@dataclass(frozen=True)
class ElemType:
    """One ONNX TensorProto element type and the device dtype that holds its values.

    `device` is None where the device has no dtype for it (the frontend refuses such
    values). A device dtype narrower than the ONNX type (int64 held as int32) is exact only
    for values in its range: constants are checked when imported, inputs when written.
    """

    code: int
    name: str
    numpy: str | None
    device: str | None


# Adding a device dtype (int64, int8, ...) to the frontend is changing its `device` here.
ELEM_TYPES: tuple[ElemType, ...] = (
    ElemType(1, "FLOAT", "float32", "float"),
    ElemType(2, "UINT8", "uint8", "uint8"),
    ElemType(3, "INT8", "int8", None),
    ElemType(4, "UINT16", "uint16", None),
    ElemType(5, "INT16", "int16", None),
    ElemType(6, "INT32", "int32", "int32"),
    ElemType(7, "INT64", "int64", "int32"),
    ElemType(8, "STRING", None, None),
    ElemType(9, "BOOL", "bool", "bool"),
    ElemType(10, "FLOAT16", "float16", "float16"),
    ElemType(11, "DOUBLE", "float64", "double"),
    ElemType(12, "UINT32", "uint32", None),
    ElemType(13, "UINT64", "uint64", None),
    ElemType(16, "BFLOAT16", None, None),
)
BY_CODE: dict[int, ElemType] = {e.code: e for e in ELEM_TYPES}
BY_NUMPY: dict[str, ElemType] = {e.numpy: e for e in ELEM_TYPES if e.numpy}


def device_dtype(code: int) -> dt.DType | None:
    """The device dtype that holds ONNX element type `code`, or None."""
    e = BY_CODE.get(code)
    return dt.DTYPES.get(e.device) if e is not None and e.device else None


def onnx_code(dtype: dt.DType) -> int:
    """The ONNX element type of a device dtype: the one whose values it holds exactly (MN-Core
    half, which ONNX cannot express, is written as IEEE float16)."""
    if dtype.is_half:
        return BY_NUMPY["float16"].code
    return BY_NUMPY[dtype.storage.name].code


# ONNX ops that are exactly one device kernel of the same operands (kernel name -> op).
UNARY: dict[str, str] = {
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "neg": "Neg",
    "abs": "Abs",
    "erf": "Erf",
    "reciprocal": "Reciprocal",
}
BINARY: dict[str, str] = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "div": "Div",
    "pow": "Pow",
    "equal": "Equal",
    "less": "Less",
    "greater": "Greater",
    "less_equal": "LessOrEqual",
    "greater_equal": "GreaterOrEqual",
}
# Variadic in ONNX, binary on the device: the exporter writes them with two operands.
VARIADIC: dict[str, str] = {"maximum": "Max", "minimum": "Min"}
REDUCE: dict[str, str] = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
                          "min": "ReduceMin"}  # fmt: skip
