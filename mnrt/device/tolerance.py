"""The tolerance model: how far an emulated result may move when only the host changes.

The emulator computes with numpy, whose float sums (BLAS GEMMs above all) are accumulated
in an order that depends on the host's CPU and BLAS kernel: the same binary, replayed on
another machine, may give results a few roundings apart. A golden's tolerance must absorb
that and nothing more, so that a wrong result (an output off by 1%) still fails. This
module is the one place that says how much that is; replay (for goldens recorded with the
default tolerance) and the compiler (for the goldens of compiled binaries) both use it.

Each kernel states its error behaviour in the kernel registry (`KernelDef.reduction`): n,
the number of terms each output element sums (a GEMM's K, a convolution's C/groups*kH*kW,
a softmax's axis length, 1 for elementwise arithmetic, 0 for kernels that only move
values). A kernel that does not state it is taken to sum its whole largest input.

Errors are measured relative to the size of what is summed, which a value's largest
finite magnitude (its scale) stands in for; the model is:

- a kernel's own error, in the unit roundoff u of its working precision (the compute dtype
  of its operands: float32 for half and float16, which the device widens), is
  u * (ULPS + LAMBDA * sqrt(n)) for n > 0: a few ulps for elementwise functions whose
  implementation differs between hosts, plus the probabilistic bound of a sum of n
  terms (Higham and Mary, "A new approach to probabilistic rounding error analysis",
  SIAM J. Sci. Comput. 2019: lambda * sqrt(n) * u with probability at least
  1 - 2 exp(-lambda**2 / 2)); 0 when n is 0;
- errors add along the dataflow, as independent rounding errors do (in quadrature, the
  assumption the sqrt(n) bound rests on): a value's error is the root of the sum of the
  squares of its kernel's own and the largest error among the kernel's inputs (the worst
  path, so depth counts, while a residual add or a concat does not count a path twice);
  host writes are exact;
- storing into a dtype coarser than the working precision (a GEMM's half output, a cast
  to half) turns an incoming error e into sqrt(2 * u_s * e) when that is larger: an
  element that moved by e crosses a rounding boundary (a jump of 2 * u_s, one ulp) with
  probability e / (2 * u_s), so the disturbance a later sum sees has that size. Chains of
  half roundings therefore settle near 2 * u_s of the scale instead of growing;
- a golden of a value with error e and scale s passes elements within
  atol = TAIL * e * s (the two replays being compared each carry an error) plus
  rtol = 2 * u_s of themselves (one ulp of the value's own dtype).

What a passing check guarantees: every element is within that bound of the recorded
result, i.e. the replay computed the same program on the same data up to host rounding
differences of the stated size; it does not say that the recorded result was accurate
(the compiler checks that separately against the model's reference). Integer and bool
values are compared exactly. An integer derived from a float comparison or truncation
may in rare cases differ across hosts: the model does not cover that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .dtypes import DType
from .kernels.registry import KernelDef, TensorSpec

ULPS = 4.0  # ulps an elementwise function may differ by between hosts' implementations
LAMBDA = 5.0  # confidence of the probabilistic sum bound (failure below 1 in 10**5 per sum)
TAIL = 2.0  # two results, each within the bound, may differ by twice it


def unit_roundoff(dtype: DType) -> float:
    """Half an ulp of 1 in the dtype as stored (MN-Core half: 2**-10, bfloat16: 2**-8); 0
    for integers."""
    if not dtype.is_float:
        return 0.0
    if dtype.codec is not None:  # stored as bit patterns numpy has no finfo for
        return 2.0 ** -(dtype.codec.man_bits + 1)
    return float(np.finfo(dtype.storage).eps) / 2


def working_roundoff(specs: Sequence[TensorSpec | None]) -> float:
    """The unit roundoff a kernel computes in: that of its coarsest float compute dtype."""
    return max(
        (float(np.finfo(t.dtype.compute).eps) / 2 for t in specs if t and t.dtype.is_float),
        default=0.0,
    )


def terms(kdef: KernelDef, ins: Sequence[TensorSpec | None], attrs: Mapping[str, Any]) -> int:
    """How many terms each output element of the kernel sums (its stated reduction; for a
    kernel that does not state one, everything its largest input holds)."""
    if kdef.reduction is not None:
        return int(kdef.reduction(ins, attrs))
    return max((t.size for t in ins if t is not None), default=1)


def kernel_errors(
    kdef: KernelDef,
    ins: Sequence[TensorSpec | None],
    outs: Sequence[TensorSpec],
    attrs: Mapping[str, Any],
    in_errors: Sequence[float],
) -> list[float]:
    """The error of each output of one kernel execution, relative to the output's scale,
    given the errors of its inputs (see the module docstring). A kernel made of others (a
    chain) gives its own (`KernelDef.errors`): its parts', each on the one before."""
    if kdef.errors is not None:
        return kdef.errors(ins, outs, attrs, in_errors)
    u = working_roundoff([*ins, *outs])
    n = terms(kdef, ins, attrs)
    own = u * (ULPS + LAMBDA * math.sqrt(n)) if n > 0 else 0.0
    error = math.hypot(own, max(in_errors, default=0.0))
    result = []
    for out in outs:
        stored = unit_roundoff(out.dtype)
        crossing = math.sqrt(2.0 * stored * error) if stored > u else 0.0
        result.append(max(error, crossing))
    return result


def golden_tolerance(dtype: DType, error: float, golden: np.ndarray) -> tuple[float, float]:
    """(rtol, atol) for a golden of a value carrying `error`: atol TAIL * error times the
    golden's largest finite magnitude, rtol one ulp of the dtype. Exact for integers and
    for values no rounding touched."""
    if not dtype.is_float or error == 0.0:
        return 0.0, 0.0
    values = np.abs(np.asarray(golden, np.float64))
    scale = float(np.max(values, where=np.isfinite(values), initial=0.0))
    return 2.0 * unit_roundoff(dtype), TAIL * error * scale


def default_tolerance(dtype: DType, error: float, golden: np.ndarray) -> tuple[float, float]:
    """The tolerance of a golden recorded without one (mnrt.compare_to_golden's None, a
    read's golden): the dtype's default, widened where the computation that produced the
    value may move it further across hosts (`golden_tolerance`). Never narrower than the
    dtype's default, so every binary that passed before still does."""
    rtol, atol = golden_tolerance(dtype, error, golden)
    return max(rtol, dtype.rtol), max(atol, dtype.atol)


def stats_tolerance(
    dtype: DType, error: float, term_scale: float | None = None
) -> tuple[float, float]:
    """(rtol, atol) for the summary statistics of an output carrying `error` (a kernel
    fingerprint's min, max and mean, which `format.fingerprints.close` holds to atol + rtol
    times the output's scale): every element may move by what its golden allows (TAIL *
    error of the scale, and one ulp of itself), so its min, max and mean may as well. An
    output that cancels to near zero still carries that error of the terms it summed:
    atol is rtol of their size, `term_scale` (KernelDef.term_scale), and where the kernel
    does not say, the dtype's default atol, which takes them to be near one. A fixed floor
    would call anything rounding in a network whose values are all far below it (one with
    random weights, activations near 1e-6)."""
    if not dtype.is_float:
        return 0.0, 0.0
    rtol = TAIL * error + 2.0 * unit_roundoff(dtype)
    return rtol, dtype.atol if term_scale is None else rtol * term_scale
