"""Fit the float32 erf coefficients in mnrt/device/kernels/unary.py, and check them.

Two fits, each a polynomial found by Lawson's iteratively reweighted least squares on
Chebyshev nodes (close to minimax), against math.erf / math.erfc in float64:

  near: erf(z) = z + z * P(z^2)                  for |z| < 1
  far:  erfc(z) = exp(-z^2) * Q(1 / (1 + z/2))    for 1 <= z <= 3.92 (beyond it erf rounds to 1)

    python tools/fit_erf.py           # print both tables and the measured error in ulps
"""

from __future__ import annotations

import math

import numpy as np

CUT, FAR_END = 1.0, 3.92
NEAR_DEGREE, FAR_DEGREE = 6, 7


def _nodes(a: float, b: float, n: int = 4000) -> np.ndarray:
    k = np.arange(n)
    return (a + b) / 2 + (b - a) / 2 * np.cos(np.pi * (k + 0.5) / n)


def _lawson(t: np.ndarray, y: np.ndarray, degree: int, scale: np.ndarray) -> np.ndarray:
    """Coefficients (lowest first) of the polynomial in t nearest y in relative max error,
    `scale` being what the error is relative to."""
    v = np.vander(t, degree + 1, increasing=True)
    w = 1 / scale
    for _ in range(40):
        coef, *_ = np.linalg.lstsq(v * w[:, None], y * w, rcond=None)
        r = np.abs(v @ coef - y) / scale
        w = w * (1 + 50 * r / r.max())
    return coef


def fit() -> tuple[list[float], list[float]]:
    z = _nodes(0.0, CUT)
    erf = np.array([math.erf(v) for v in z])
    near = _lawson(z * z, erf / z - 1, NEAR_DEGREE, erf / z)
    z = _nodes(CUT, FAR_END)
    scaled = np.array([math.erfc(v) * math.exp(v * v) for v in z])
    far = _lawson(1 / (1 + z / 2), scaled, FAR_DEGREE, scaled)
    as_f32 = lambda c: [float(np.float32(x)) for x in c]  # noqa: E731
    return as_f32(near), as_f32(far)


def main() -> None:
    near, far = fit()
    print(f"_ERF_NEAR = {tuple(near)!r}\n_ERFC_FAR = {tuple(far)!r}")
    from mnrt.device.kernels.unary import _erf

    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 8_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate(
        [
            bits[np.isfinite(bits) & (np.abs(bits) < 5)],
            np.linspace(-5, 5, 2_000_001, dtype=np.float32),
        ]
    )
    exact = np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)
    ulp = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
    err = np.abs(_erf(x).astype(np.float64) - exact) / ulp
    print(f"mnrt's erf over {x.size} float32 values: max error {err.max():.2f} ulp "
          f"at {x[err.argmax()]!r}, {np.mean(err < 0.5):.1%} correctly rounded")  # fmt: skip


if __name__ == "__main__":
    main()
