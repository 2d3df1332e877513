"""gemm: y = alpha * op(a) @ op(b) + beta * c, batched, on the matrix unit.

Half and IEEE float16 operands are widened to float32 and multiplied with float32
accumulation, as the MAU accumulates; the result is rounded once when stored. numpy's
native float16 matmul (slow and half-accumulating) is never used.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError, KernelAttributeError, ShapeError
from .. import dtypes as dt
from .common import MATRIX_OUT_DTYPES, mau_blocks, require_rank, same_dtype
from .registry import Attr, Cost, KernelDef, OutSpec, products, register
from .unary import EPILOGUES, epilogue, epilogue_flops

# The matrix kernels' output dtypes, and int32 products, which compute in int32.
_OUT_DTYPES = {**MATRIX_OUT_DTYPES, dt.INT32: (dt.INT32,)}
_INT_EPILOGUES = ("none", "relu")  # the activations defined on int32


def _op_shape(shape: tuple[int, ...], trans: bool) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2]) if trans else shape


def _infer(ins, attrs):
    a, b, c = [*ins, None][:3]
    in_dt = same_dtype("gemm", [a, b])
    if in_dt not in _OUT_DTYPES:
        raise DTypeError(f"kernel 'gemm' does not take {in_dt.name} operands")
    require_rank("gemm", "a", a, range(2, 9))
    require_rank("gemm", "b", b, range(2, 9))
    sa, sb = _op_shape(a.shape, attrs["trans_a"]), _op_shape(b.shape, attrs["trans_b"])
    if sa[-1] != sb[-2]:
        raise ShapeError(
            f"kernel 'gemm': inner dimensions differ: op(a) is {sa}, op(b) is {sb} "
            "(check trans_a / trans_b)"
        )
    try:
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError:
        raise ShapeError(
            f"kernel 'gemm': batch dimensions {sa[:-2]} and {sb[:-2]} do not broadcast"
        ) from None
    out = (*batch, sa[-2], sb[-1])
    if c is not None:
        if c.dtype is not in_dt and c.dtype not in _OUT_DTYPES[in_dt]:
            raise DTypeError(
                f"kernel 'gemm': c is {c.dtype.name}, expected {in_dt.name} like a and b"
            )
        try:
            if np.broadcast_shapes(c.shape, out) != out:
                raise ValueError
        except ValueError:
            raise ShapeError(
                f"kernel 'gemm': c of shape {c.shape} does not broadcast to the output {out}"
            ) from None
    if in_dt is dt.INT32:
        _check_int_attrs(attrs, c is not None)
    return [OutSpec(out, _OUT_DTYPES[in_dt])]


def _check_int_attrs(attrs, has_c: bool) -> None:
    """An int32 gemm computes in int32: its scales must be int32 values (a fraction would be
    truncated before it scaled anything) and its epilogue one defined on int32, as the
    unary kernels refuse the other activations for int32."""
    scales = ("alpha", "beta") if has_c else ("alpha",)
    for name in scales:
        v = attrs[name]
        if not (v.is_integer() and -(2**31) <= v < 2**31):
            raise KernelAttributeError(
                f"kernel 'gemm': attribute '{name}' is {v!r}, but int32 operands need a whole "
                "number in the int32 range; cast a and b to a float dtype for other scales"
            )
    if attrs["epilogue"] not in _INT_EPILOGUES:
        raise KernelAttributeError(
            f"kernel 'gemm': epilogue '{attrs['epilogue']}' needs floating-point operands; "
            f"int32 takes {' or '.join(map(repr, _INT_EPILOGUES))}"
        )


def _compute(ins, attrs, outs):
    a, b, c = [*ins, None][:3]
    if attrs["trans_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["trans_b"]:
        b = np.swapaxes(b, -1, -2)
    dest = outs[0].buf
    acc = np.result_type(a.dtype, b.dtype)
    if dest is not None and dest.dtype != acc:
        dest = None  # e.g. half inputs with a float output: float32 matmul, then store
    elif dest is not None and c is not None and np.may_share_memory(dest, c):
        dest = None  # y = a @ b + y: c is read after the product, so it must not be y
    y = np.matmul(a, b, out=dest)
    if attrs["alpha"] != 1.0:
        y *= y.dtype.type(attrs["alpha"])
    if c is not None and attrs["beta"] != 0.0:
        cv = c if attrs["beta"] == 1.0 else c * c.dtype.type(attrs["beta"])
        y += cv.astype(y.dtype, copy=False)
    return [epilogue(attrs["epilogue"], y)]


def _cost(ins, outs, attrs):
    a, c = ins[0], (*ins, None)[2]
    sa = _op_shape(a.shape, attrs["trans_a"])
    k = sa[-1]
    out = outs[0]
    m, n = out.shape[-2], out.shape[-1]
    batch = math.prod(out.shape[:-2])
    # Per output element: k multiply-adds, then what _compute applies after the product.
    add_c = c is not None and attrs["beta"] != 0.0
    per_out = (
        2.0 * k
        + (attrs["alpha"] != 1.0)
        + add_c * (1 + (attrs["beta"] != 1.0))
        + epilogue_flops(attrs["epilogue"])
    )
    # Mapping: each L1B computes 256x256 output blocks, its PEs' local memories holding the
    # a and b panels; every k-step streams those panels once from L1BM.
    tile = 256
    moved = sum(t.nbytes for t in ins if t is not None) + out.nbytes
    blocks, fill = mau_blocks(m, n)
    return Cost(
        flops=per_out * batch * m * n,
        dram_bytes=float(moved),
        sram_bytes=2.0 * batch * m * n * k / tile * a.dtype.itemsize,
        parallel=batch * blocks,
        matrix=True,
        fill=fill,
    )


register(
    KernelDef(
        name="gemm",
        matrix=True,
        doc="y = alpha * op(a) @ op(b) + beta * c, batched; half/mixed accumulate in float32",
        inputs=("a", "b", "c?"),
        outputs=("y",),
        attrs={
            "trans_a": Attr("bool", False, "use a's last two dims transposed"),
            "trans_b": Attr("bool", False, "use b's last two dims transposed"),
            "alpha": Attr("float", 1.0, "scale of the product (a whole number for int32)"),
            "beta": Attr("float", 1.0, "scale of c (a whole number for int32)"),
            "epilogue": Attr("str", "none", "activation of the result", choices=EPILOGUES),
        },
        infer=_infer,
        compute=_compute,
        cost=_cost,
        reduction=lambda ins, attrs: _op_shape(ins[0].shape, attrs["trans_a"])[-1] + 1,
        terms=products,
    )
)
