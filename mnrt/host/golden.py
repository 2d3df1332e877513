"""Comparing device results with goldens: |a - b| <= atol + rtol * |b|, elementwise.

Shared by live checks (mnrt.compare_to_golden) and replay. Default tolerances come from the
dtype table (integers and bool are exact). NaN matches NaN at the same place; every
mismatch is counted, and the first `MAX_LISTED` of them are listed by index.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..device.dtypes import DType

MAX_LISTED = 100
MAX_WORST = 5  # mismatching elements a failed check describes, largest error first


@dataclass
class Check:
    """The verdict on one golden."""

    name: str
    passed: bool
    dtype: str
    shape: tuple[int, ...]
    rtol: float
    atol: float
    max_abs_err: float
    max_rel_err: float
    pcc: float
    mismatches: int
    first_mismatch: tuple[int, ...] | None
    mismatch_indices: list[tuple[int, ...]] = field(default_factory=list)
    message: str = ""  # why it failed (empty when it passed)
    # The MAX_WORST mismatching elements with the largest errors: each a dict of index,
    # expected, actual, abs_err and rel_err.
    worst: list[dict] = field(default_factory=list)
    # The binary's command whose golden this is, when a replay checked it (a report's checks
    # and the binary's goldens are then matched by it, whatever the checks are named).
    command: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def tolerances(dtype: DType, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """Explicit tolerances win; None or NaN means the dtype's default."""
    r = dtype.rtol if rtol is None or math.isnan(rtol) else float(rtol)
    a = dtype.atol if atol is None or math.isnan(atol) else float(atol)
    return r, a


def compare(
    name: str,
    actual: np.ndarray,
    expected: np.ndarray,
    dtype: DType,
    rtol: float | None = None,
    atol: float | None = None,
) -> Check:
    rtol, atol = tolerances(dtype, rtol, atol)
    shape = tuple(np.shape(expected))
    if np.shape(actual) != shape:
        return Check(
            name,
            False,
            dtype.name,
            shape,
            rtol,
            atol,
            math.inf,
            math.inf,
            0.0,
            int(np.prod(shape)),
            None,
            message=f"shape {np.shape(actual)} differs from the golden's {shape}",
        )
    identical = Check(name, True, dtype.name, shape, rtol, atol, 0.0, 0.0, 1.0, 0, None)
    if np.array_equal(actual, expected):  # identical results need no error analysis
        return identical
    if np.asarray(actual).dtype.kind in "iu" and rtol == atol == 0.0:
        return _compare_exact(name, np.asarray(actual), np.asarray(expected), shape, dtype)
    a = np.asarray(actual, np.float64)
    b = np.asarray(expected, np.float64)
    finite = _compare_finite(name, a.reshape(-1), b.reshape(-1), shape, dtype, rtol, atol)
    if finite is not None:
        return finite
    if actual.dtype.kind == "f" and np.array_equal(actual, expected, equal_nan=True):
        return identical  # NaN in the same places (a slow test: only once NaN is seen)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(a - b)
        alike = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
        # An infinite golden is matched only by the same infinity (`alike`), not by the
        # infinite tolerance rtol * |b| would give it.
        ok = ((diff <= atol + rtol * np.abs(b)) & np.isfinite(b)) | alike
        err = np.where(alike, 0.0, np.where(np.isnan(diff), np.inf, diff))
        # No error is none relative to any golden (0 / 0 and 0 / NaN would be NaN, reported
        # below as an infinite one); any other relative to a golden of 0 is infinite.
        rel = np.where(err == 0.0, 0.0, err / np.abs(b))
        max_abs = float(err.max()) if err.size else 0.0
        max_rel = float(rel.max()) if rel.size else 0.0
    if math.isnan(max_rel):  # an infinite error relative to an infinite golden
        max_rel = math.inf
    bad = np.flatnonzero(~ok)
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    return _check(name, dtype, shape, rtol, atol, bad, max_abs, max_rel, _pcc(a, b), flat_a, flat_b)


def _compare_exact(
    name: str, actual: np.ndarray, expected: np.ndarray, shape: tuple[int, ...], dtype: DType
) -> Check:
    """Integers compared exactly, in their own type: float64 would merge int64 values
    above 2**53 that differ. The error statistics are worked out in Python integers over
    the mismatches only."""
    a, b = actual.reshape(-1), expected.reshape(-1)
    bad = np.flatnonzero(a != b)
    errs = [abs(int(x) - int(y)) for x, y in zip(a[bad].tolist(), b[bad].tolist(), strict=True)]
    rels = [e / abs(y) if y else math.inf for e, y in zip(errs, b[bad].tolist(), strict=True)]
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    pcc = _pcc(fa, fb, finite=True)
    return _check(
        name, dtype, shape, 0.0, 0.0, bad, float(max(errs)), float(max(rels)), pcc, fa, fb
    )


def _compare_finite(
    name: str,
    a: np.ndarray,
    b: np.ndarray,
    shape: tuple[int, ...],
    dtype: DType,
    rtol: float,
    atol: float,
) -> Check | None:
    """The same verdict in fewer passes over the data, for the usual case where every
    value is finite (None otherwise): a NaN or infinity anywhere in either array makes the
    largest difference NaN or infinite, which is how that case is told apart. a and b are
    flat float64 arrays."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf; a difference overflowing
        diff = np.abs(a - b)
    max_abs = float(diff.max()) if diff.size else 0.0
    if not math.isfinite(max_abs):
        return None
    scale = np.abs(b)
    with np.errstate(over="ignore"):  # rtol * |b| overflowing is an infinite tolerance
        bad = np.flatnonzero(diff > atol + rtol * scale)
    # A difference from a golden of 0 is infinitely large relative to it; no difference
    # from one is none (0 / 0, NaN, which fmax passes over).
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        rel = np.divide(diff, scale, out=diff)
    max_rel = float(np.fmax.reduce(rel)) if rel.size else 0.0
    max_rel = 0.0 if math.isnan(max_rel) else max_rel
    pcc = _pcc(a, b, finite=True)
    return _check(name, dtype, shape, rtol, atol, bad, max_abs, max_rel, pcc, a, b)


def _check(
    name: str,
    dtype: DType,
    shape: tuple[int, ...],
    rtol: float,
    atol: float,
    bad: np.ndarray,
    max_abs: float,
    max_rel: float,
    pcc: float,
    actual: np.ndarray,
    expected: np.ndarray,
) -> Check:
    """The verdict from the flat positions of the mismatches and the error statistics
    (`actual` and `expected` flat float64 arrays)."""
    listed = _indices(bad, shape)
    worst = _worst(bad, actual, expected, shape)
    message = ""
    if bad.size:
        w = worst[0]
        message = (
            f"{bad.size} of {expected.size} elements differ by more than atol + rtol * "
            f"|expected| (rtol {rtol:g}, atol {atol:g}); the largest error is at "
            f"{tuple(w['index'])}: expected {w['expected']:.7g}, got {w['actual']:.7g}"
        )
    return Check(
        name=name,
        passed=bad.size == 0,
        dtype=dtype.name,
        shape=shape,
        rtol=rtol,
        atol=atol,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        pcc=pcc,
        mismatches=int(bad.size),
        first_mismatch=listed[0] if listed else None,
        mismatch_indices=listed,
        message=message,
        worst=worst,
    )


def _worst(
    bad: np.ndarray, actual: np.ndarray, expected: np.ndarray, shape: tuple[int, ...]
) -> list[dict]:
    """The MAX_WORST mismatches with the largest absolute errors (a NaN where a number was
    expected counts as infinite), largest first."""
    if bad.size == 0:
        return []
    a, b = actual[bad], expected[bad]
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - b)
    err = np.where(np.isnan(err), np.inf, err)
    top = np.argsort(-err, kind="stable")[:MAX_WORST] if err.size <= MAX_WORST else None
    if top is None:
        part = np.argpartition(-err, MAX_WORST - 1)[:MAX_WORST]
        top = part[np.argsort(-err[part], kind="stable")]
    indices = _indices(bad[top], shape)
    # as max_rel_err: infinite against a golden of 0 (and an infinite error against an
    # infinite golden, inf / inf, is no less)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        rel = err[top] / np.abs(b[top])
    rel[np.isnan(rel)] = np.inf
    return [
        {
            "index": list(index),
            "expected": float(b[i]),
            "actual": float(a[i]),
            "abs_err": float(err[i]),
            "rel_err": float(r),
        }
        for index, i, r in zip(indices, top.tolist(), rel.tolist())
    ]


def _indices(bad: np.ndarray, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The first MAX_LISTED flat mismatch positions as indices (a scalar's is ())."""
    if not shape:
        return [()] * bad.size
    return list(zip(*(c.tolist() for c in np.unravel_index(bad[:MAX_LISTED], shape))))


def _pcc(a: np.ndarray, b: np.ndarray, finite: bool = False) -> float:
    """Pearson correlation of the finite values; 1.0 for identical constant arrays, and 0.0
    when the non-finite values differ (a NaN where the golden has a number, say): the
    finite values alone would correlate perfectly and hide the mismatch."""
    if finite:
        x, y = a.ravel(), b.ravel()
    else:
        keep = np.isfinite(a) & np.isfinite(b)
        if not keep.all() and not np.array_equal(a[~keep], b[~keep], equal_nan=True):
            return 0.0
        x, y = (a.ravel(), b.ravel()) if keep.all() else (a[keep], b[keep])
    if x.size == 0:  # nothing finite to correlate: perfect only if nothing differs
        return 1.0 if np.array_equal(a, b, equal_nan=True) else 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        pcc = _correlation(x, y)
        if pcc is None:  # values near 1e200 or 1e-200, whose squares float64 cannot hold:
            pcc = _correlation(_unit(x), _unit(y))  # scaling does not change a correlation
    if pcc is None:  # a constant array (no variance)
        return 1.0 if np.array_equal(x, y) else 0.0
    return pcc


_SUM_OF_SQUARES_FLOOR = 1e-150  # below it, squares lose precision and their product underflows


def _correlation(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson correlation of two finite flat arrays; None when a sum of squares is not a
    normal float64 well above underflow (0 for a constant array, inf or NaN on overflow)."""
    xs, ys = x - x.mean(), y - y.mean()
    sxx, syy = float(xs @ xs), float(ys @ ys)
    if not (_SUM_OF_SQUARES_FLOOR < sxx < math.inf and _SUM_OF_SQUARES_FLOOR < syy < math.inf):
        return None
    return float(xs @ ys) / (math.sqrt(sxx) * math.sqrt(syy))


def _unit(x: np.ndarray) -> np.ndarray:
    """x scaled to a largest magnitude of 1 (all zeros stay zeros)."""
    peak = float(np.max(np.abs(x)))
    return x / peak if peak > 0.0 else x
