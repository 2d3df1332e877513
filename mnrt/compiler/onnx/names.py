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
    values, naming the type); every type that has one is held in full width, so values and
    the dtype a model's outputs come back in are the model's own.
    """

    code: int
    name: str
    numpy: str | None
    device: str | None


# Adding a device dtype to the frontend is changing its `device` here. Types without one
# are listed too, so that a refusal names them ("float8e4m3fn", not "code 17").
ELEM_TYPES: tuple[ElemType, ...] = (
    ElemType(1, "FLOAT", "float32", "float"),
    ElemType(2, "UINT8", "uint8", "uint8"),
    ElemType(3, "INT8", "int8", "int8"),
    ElemType(4, "UINT16", "uint16", "uint16"),
    ElemType(5, "INT16", "int16", "int16"),
    ElemType(6, "INT32", "int32", "int32"),
    ElemType(7, "INT64", "int64", "int64"),
    ElemType(8, "STRING", None, None),
    ElemType(9, "BOOL", "bool", "bool"),
    ElemType(10, "FLOAT16", "float16", "float16"),
    ElemType(11, "DOUBLE", "float64", "double"),
    ElemType(12, "UINT32", "uint32", "uint32"),
    ElemType(13, "UINT64", "uint64", "uint64"),
    ElemType(14, "COMPLEX64", "complex64", None),
    ElemType(15, "COMPLEX128", "complex128", None),
    # numpy: for bfloat16 on, ml_dtypes' names, as onnx's own arrays of these types have
    ElemType(16, "BFLOAT16", "bfloat16", "bfloat16"),
    ElemType(17, "FLOAT8E4M3FN", "float8_e4m3fn", None),
    ElemType(18, "FLOAT8E4M3FNUZ", "float8_e4m3fnuz", None),
    ElemType(19, "FLOAT8E5M2", "float8_e5m2", None),
    ElemType(20, "FLOAT8E5M2FNUZ", "float8_e5m2fnuz", None),
    ElemType(21, "UINT4", "uint4", None),
    ElemType(22, "INT4", "int4", None),
    ElemType(23, "FLOAT4E2M1", "float4_e2m1fn", None),
    ElemType(24, "FLOAT8E8M0", "float8_e8m0fnu", None),
    ElemType(25, "UINT2", "uint2", None),
    ElemType(26, "INT2", "int2", None),
)
BY_CODE: dict[int, ElemType] = {e.code: e for e in ELEM_TYPES}
BY_NUMPY: dict[str, ElemType] = {e.numpy: e for e in ELEM_TYPES if e.numpy}
BY_DEVICE: dict[str, ElemType] = {e.device: e for e in ELEM_TYPES if e.device}


def device_dtype(code: int) -> dt.DType | None:
    """The device dtype that holds ONNX element type `code`, or None."""
    e = BY_CODE.get(code)
    return dt.DTYPES.get(e.device) if e is not None and e.device else None


def onnx_code(dtype: dt.DType) -> int:
    """The ONNX element type of a device dtype: the one whose values it holds exactly (MN-Core
    half, which ONNX cannot express, is written as IEEE float16)."""
    if dtype.is_half:
        return BY_NUMPY["float16"].code
    return BY_DEVICE[dtype.name].code


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
    "sin": "Sin",
    "cos": "Cos",
    "tan": "Tan",
    "asin": "Asin",
    "acos": "Acos",
    "atan": "Atan",
    "sinh": "Sinh",
    "cosh": "Cosh",
    "asinh": "Asinh",
    "acosh": "Acosh",
    "atanh": "Atanh",
    "floor": "Floor",
    "ceil": "Ceil",
    "round": "Round",
    "sign": "Sign",
    "isnan": "IsNaN",
    "softplus": "Softplus",
    "softsign": "Softsign",
    "bitwise_not": "BitwiseNot",
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
    "bitwise_and": "BitwiseAnd",
    "bitwise_or": "BitwiseOr",
    "bitwise_xor": "BitwiseXor",
    "logical_and": "And",
    "logical_or": "Or",
    "logical_xor": "Xor",
}
# Variadic in ONNX, binary on the device: the exporter writes them with two operands.
VARIADIC: dict[str, str] = {"maximum": "Max", "minimum": "Min"}
REDUCE: dict[str, str] = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
                          "min": "ReduceMin", "prod": "ReduceProd"}  # fmt: skip
