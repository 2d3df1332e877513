"""Helpers shared by kernel families: spec checks and the cost of streaming kernels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import DTypeError, ShapeError
from ..dtypes import DType
from .registry import Cost, TensorSpec


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


def pad_hw(x: np.ndarray, top: int, left: int, bottom: int, right: int, fill=0) -> np.ndarray:
    """x [N, C, H, W] with its last two axes padded by `fill`: one fill and one copy,
    several times cheaper than np.pad for the small feature maps kernels see."""
    n, c, h, w = x.shape
    out = np.full((n, c, top + h + bottom, left + w + right), fill, x.dtype)
    out[:, :, top : top + h, left : left + w] = x
    return out
