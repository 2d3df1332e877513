"""Helpers shared by kernel families: spec checks and the cost of streaming kernels."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from ...errors import DeviceExecutionError, DTypeError, KernelAttributeError, ShapeError
from .. import dtypes as dt
from ..dtypes import INDEX, DType
from .registry import Cost, TensorSpec

# What a matrix kernel (gemm, conv2d, conv_transpose2d) may write for each dtype of its
# operands, natural first: the MAU accumulates in float, so half, float16 and bfloat16
# operands may give a float result (MLSDK's "mixed": half in, float out).
MATRIX_OUT_DTYPES = {
    dt.DOUBLE: (dt.DOUBLE,),
    dt.FLOAT: (dt.FLOAT,),
    dt.HALF: (dt.HALF, dt.FLOAT),
    dt.FLOAT16: (dt.FLOAT16, dt.FLOAT),
    dt.BFLOAT16: (dt.BFLOAT16, dt.FLOAT),
}


def present(ins: Sequence[TensorSpec | None]) -> list[TensorSpec]:
    return [t for t in ins if t is not None]


def same_dtype(kernel: str, ins: Sequence[TensorSpec | None]) -> DType:
    """The one dtype all present inputs share; mixing dtypes needs an explicit cast."""
    specs = present(ins)
    first = specs[0].dtype
    for t in specs[1:]:
        if t.dtype is not first:
            raise DTypeError(
                f"kernel '{kernel}': inputs mix {first.name} and {t.dtype.name}; "
                "insert a 'cast' kernel to make them agree"
            )
    return first


def require_float(kernel: str, dt: DType) -> None:
    if not dt.is_float:
        raise DTypeError(f"kernel '{kernel}' needs floating-point operands, got {dt.name}")


def require_rank(kernel: str, operand: str, t: TensorSpec, ranks: Sequence[int]) -> None:
    if len(t.shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeError(
            f"kernel '{kernel}': operand '{operand}' must have rank {want}, got shape {t.shape}"
        )


def require_index(kernel: str, operand: str, t: TensorSpec) -> None:
    """Index operands are int32 or int64, as ONNX has them."""
    if t.dtype not in INDEX:
        raise DTypeError(
            f"kernel '{kernel}': {operand} must be int32 or int64, got {t.dtype.name}; "
            "cast them first"
        )


def checked_indices(kernel: str, idx: np.ndarray, dim: int, where: str) -> np.ndarray:
    """Indices into an axis of length `dim` made non-negative (negative ones count from
    the end), as int64. One out of range is an error of the device, raised by the next
    finish(), never a wrong read."""
    idx = np.asarray(idx)
    bad = (idx < -dim) | (idx >= dim)
    if bad.any():
        valid = f"{-dim}..{dim - 1}" if dim else "none (the axis is empty)"
        raise DeviceExecutionError(
            f"kernel '{kernel}': index {int(idx[bad].flat[0])} is out of range for {where} "
            f"of length {dim}; valid indices are {valid}"
        )
    wide = idx.astype(np.int64)
    return np.where(wide < 0, wide + dim, wide)


def gather_cost(ins: Sequence[TensorSpec | None], outs: Sequence[TensorSpec]) -> Cost:
    """Cost of a kernel that reads its indices (input 1) and only the elements of its data
    (input 0) that it writes out, not the whole table."""
    rows, idx = float(outs[0].nbytes), float(ins[1].nbytes)
    return Cost(flops=0.0, dram_bytes=idx + 2.0 * rows, traffic=(rows, idx, rows))


def normalize_axis(kernel: str, axis: int, rank: int) -> int:
    """`axis` as 0..rank-1. A scalar has no axis to name, so rank 0 is always refused."""
    if not -rank <= axis < rank:
        reason = "a scalar has no axes" if rank == 0 else f"out of range for rank {rank}"
        raise ShapeError(f"kernel '{kernel}': axis {axis} is {reason}")
    return axis % rank


def streaming_cost(
    ins: Sequence[TensorSpec | None], outs: Sequence[TensorSpec], flops_per_elem: float = 1.0
) -> Cost:
    """Cost of a kernel that reads each input once and writes each output once."""
    moved = sum(t.nbytes for t in present(ins)) + sum(t.nbytes for t in outs)
    elems = max((t.size for t in outs), default=0)
    return Cost(flops=flops_per_elem * elems, dram_bytes=float(moved))


def per_input_cost(
    ins: Sequence[TensorSpec | None], outs: Sequence[TensorSpec], flops_per_elem: float = 1.0
) -> Cost:
    """Streaming cost with `flops_per_elem` operations per input element, however small
    the output (a reduction, a scan)."""
    moved = sum(t.nbytes for t in present(ins)) + sum(t.nbytes for t in outs)
    return Cost(flops=flops_per_elem * ins[0].size, dram_bytes=float(moved))


def mau_blocks(rows: int, cols: int) -> tuple[int, float]:
    """How a rows x cols matrix product maps onto the MAU, which works on 4x4 output
    blocks, one block per PE per wave: the blocks (Cost.parallel, per product) and the
    share of them the product fills (Cost.fill), since blocks at a ragged edge are partly
    empty but take their PE for the whole wave."""
    blocks = math.ceil(rows / 4) * math.ceil(cols / 4)
    return blocks, rows * cols / (16 * blocks) if blocks else 1.0


# The most elements a kernel may materialise as a temporary (a padded input, im2col columns):
# 4 GiB of float32. A binary cannot make the emulator touch more host memory than this for
# one kernel, whatever its attributes say (its buffers are bounded by the device's DRAM).
MAX_TEMPORARY_ELEMENTS = 1 << 30
# Padding may make the padded input at most this many times the input (or 4M elements): more
# is windows over nothing but padding, which no model needs.
MAX_PADDING_GROWTH = 16


# Bytes of temporary columns a thread keeps from one kernel to the next (see `columns`).
KEPT_COLUMNS = 256 << 20
_kept = threading.local()


def columns(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Uninitialised memory for a kernel's temporary columns (im2col), which the next such
    kernel on this thread reuses: allocated afresh, a large array is mapped anew and every
    page of it faults as it is first written (the light VGG-19's early convolutions: 42,000
    faults, a quarter of each run). Up to KEPT_COLUMNS bytes are kept per thread; the
    caller must be done with the array when its kernel returns."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > KEPT_COLUMNS:
        return np.empty(shape, dtype)
    space = getattr(_kept, "space", None)
    if space is None or space.nbytes < nbytes:
        space = _kept.space = np.empty(nbytes, np.uint8)
    return space[:nbytes].view(dtype).reshape(shape)


def check_temporary(kernel: str, what: str, elements: int) -> None:
    if elements > MAX_TEMPORARY_ELEMENTS:
        raise KernelAttributeError(
            f"kernel '{kernel}': {what} would take {elements} elements, more than the "
            f"emulator's limit of {MAX_TEMPORARY_ELEMENTS} for one kernel's temporaries; "
            "split the work (a smaller batch or kernel)"
        )


def check_padding(kernel: str, shape: tuple[int, ...], padding: tuple[int, ...]) -> None:
    """The padded input an NCHW kernel materialises, held to a sane size before anything is
    allocated: padding (top, left, bottom, right) far beyond the input is refused."""
    n, c, h, w = shape
    pt, pl, pb, pr = padding
    padded = n * c * (h + pt + pb) * (w + pl + pr)
    if padded > max(MAX_PADDING_GROWTH * n * c * h * w, 1 << 22):
        raise KernelAttributeError(
            f"kernel '{kernel}': padding {tuple(padding)} makes the padded input "
            f"{h + pt + pb}x{w + pl + pr} from {h}x{w}; pad at most as much as the windows "
            "need (a window of nothing but padding is never useful)"
        )
    check_temporary(kernel, "the padded input", padded)


def pad_hw(x: np.ndarray, top: int, left: int, bottom: int, right: int, fill=0) -> np.ndarray:
    """x [N, C, H, W] with its last two axes padded by `fill`: one fill and one copy,
    several times cheaper than np.pad for the small feature maps kernels see."""
    n, c, h, w = x.shape
    out = np.full((n, c, top + h + bottom, left + w + right), fill, x.dtype)
    out[:, :, top : top + h, left : left + w] = x
    return out
