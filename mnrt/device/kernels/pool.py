"""2-D pooling on NCHW: max_pool2d, avg_pool2d and global_avg_pool2d.

Windows are walked tap by tap: each kernel tap is one strided view of the padded input, and
the output accumulates over the kH*kW taps, which keeps every numpy pass as large as the
output. Half and IEEE float16 arrive widened to float32 and accumulate in float32.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ...errors import DTypeError, KernelAttributeError, ShapeError
from .. import dtypes as dt
from .common import check_padding, pad_hw, require_float, require_rank, streaming_cost
from .conv import check_ints
from .registry import Attr, KernelDef, OutSpec, exact, largest, register

_NUMERIC = dt.NUMERIC


def _window_count(size: int, before: int, after: int, k: int, s: int, d: int, ceil: bool) -> int:
    """How many windows fit along one axis; window i starts at input index i * s - before
    (negative inside the padding).

    In ceil mode a last, partial window is added when it starts inside the input or the
    leading padding, as PyTorch and ONNX do; it may reach past the trailing padding."""
    span = size + before + after - d * (k - 1) - 1
    if span < 0:
        return 0
    count = (-(-span // s) if ceil else span // s) + 1
    if ceil and (count - 1) * s >= size + before:
        count -= 1
    return count


# Windows in the leading padding whose taps are checked one by one at most (see `_empty`).
_CHECKED_WINDOWS = 1 << 16


def _empty(size: int, before: int, count: int, k: int, s: int, d: int) -> bool | None:
    """Whether some window along one axis holds no input element (None: whether it does
    could not be told cheaply). Worked out without listing the windows: infer runs on a
    binary's declared shapes, and an axis of 2**31 windows would be a 16 GiB list.

    A window starting at st >= 0 holds one when st < size: the last tells for them all. One
    starting at st < 0 first reaches the input at tap ceil(-st / d), at index st mod d: it
    holds one when that tap exists (hardest for the first window) and st mod d < size
    (always, when size >= d)."""
    if (count - 1) * s - before >= size:  # the last window starts past the input
        return True
    inside = min(count, -(-before // s))  # windows starting in the leading padding
    if inside == 0:
        return False
    if -(-before // d) >= k:
        return True
    if size >= d:
        return False
    step = math.gcd(s, d)
    period = d // step  # st mod d repeats with this period in the window index
    if min(inside, period) <= _CHECKED_WINDOWS:
        starts = np.arange(min(inside, period), dtype=np.int64) * s - before
        return bool((starts % d >= size).any())
    if inside >= period:  # every st mod d of the orbit occurs: the largest tells
        return (-before) % step + d - step >= size
    return None


class _Geometry:
    """Validated window layout of one pooling call, shared by infer and compute. Made once
    per kernel name, input shape and attributes (see `_geometry`), not on every run."""

    def __init__(self, name: str, shape: tuple[int, ...], attrs) -> None:
        check_ints(name, "kernel", attrs["kernel"], 2, 1)
        stride = attrs["stride"] or attrs["kernel"]
        check_ints(name, "stride", stride, 2, 1)
        check_ints(name, "padding", attrs["padding"], 4, 0)
        dilation = attrs.get("dilation", (1, 1))
        check_ints(name, "dilation", dilation, 2, 1)
        self.kernel, self.stride, self.dilation = attrs["kernel"], stride, dilation
        pt, pl, pb, pr = attrs["padding"]
        self.before, self.after = (pt, pl), (pb, pr)
        check_padding(name, shape, attrs["padding"])
        counts = []
        for ax in range(2):
            size, k, s, d = shape[2 + ax], self.kernel[ax], stride[ax], dilation[ax]
            padded = size + self.before[ax] + self.after[ax]
            count = _window_count(
                size, self.before[ax], self.after[ax], k, s, d, attrs["ceil_mode"]
            )
            if d * (k - 1) + 1 > padded or count == 0:
                raise ShapeError(
                    f"kernel '{name}': the {'row' if ax == 0 else 'column'} window "
                    f"({k} taps, dilation {d}) does not fit the padded input of length "
                    f"{padded}; pad more or shrink the kernel"
                )
            empty = _empty(size, self.before[ax], count, k, s, d)
            if empty is None:
                raise KernelAttributeError(
                    f"kernel '{name}': dilation {d} is longer than the input ({size}) and "
                    f"padding {attrs['padding']} puts over {_CHECKED_WINDOWS} windows before "
                    "it; reduce the padding or the dilation"
                )
            if empty:
                raise KernelAttributeError(
                    f"kernel '{name}': padding {attrs['padding']} leaves a window with no "
                    "input element in it; reduce the padding"
                )
            counts.append(count)
        self.out = (counts[0], counts[1])
        self.shape = shape
        self._counts: dict[bool, np.ndarray] = {}

    def starts(self, ax: int) -> np.ndarray:
        """First input index of every window along axis `ax` (2 + ax of the input), for a
        run: as many as the output has along it."""
        return np.arange(self.out[ax], dtype=np.int64) * self.stride[ax] - self.before[ax]

    def padded(self, x: np.ndarray, fill) -> np.ndarray:
        """x padded with `fill` far enough for every window, ceil-mode overhang included."""
        ends = [
            (self.out[ax] - 1) * self.stride[ax]
            - self.before[ax]
            + self.dilation[ax] * (self.kernel[ax] - 1)
            + 1
            for ax in range(2)
        ]
        widths = [(self.before[ax], max(0, ends[ax] - x.shape[2 + ax])) for ax in range(2)]
        if not any(w for pair in widths for w in pair):
            return x
        (top, bottom), (left, right) = widths
        return pad_hw(x, top, left, bottom, right, fill)

    def taps(self, xp: np.ndarray):
        """One strided [N, C, OH, OW] view of the padded input per kernel tap."""
        (oh, ow), (sh, sw), (dh, dw) = self.out, self.stride, self.dilation
        for i in range(self.kernel[0]):
            rows = slice(i * dh, i * dh + (oh - 1) * sh + 1, sh)
            for j in range(self.kernel[1]):
                yield xp[:, :, rows, j * dw : j * dw + (ow - 1) * sw + 1 : sw]

    def counts(self, include_pad: bool) -> np.ndarray:
        """How many elements each window averages: real ones, or those of the padded input
        too (never the ceil-mode overhang past the trailing padding)."""
        if include_pad in self._counts:
            return self._counts[include_pad]
        per_axis = []
        for ax in range(2):
            size = self.shape[2 + ax]
            lo, hi = (-self.before[ax], size + self.after[ax]) if include_pad else (0, size)
            taps = self.starts(ax)[:, None] + self.dilation[ax] * np.arange(self.kernel[ax])
            per_axis.append(((taps >= lo) & (taps < hi)).sum(axis=1))
        counts = self._counts[include_pad] = np.multiply.outer(per_axis[0], per_axis[1])
        return counts


@functools.lru_cache(maxsize=512)
def _cached_geometry(name: str, shape: tuple[int, ...], attrs: tuple) -> _Geometry:
    return _Geometry(name, shape, dict(attrs))


def _geometry(name: str, shape: tuple[int, ...], attrs) -> _Geometry:
    return _cached_geometry(name, tuple(shape), tuple(sorted(attrs.items())))


def _check_input(name: str, x, allowed: tuple) -> None:
    require_rank(name, "x", x, (4,))
    if x.dtype not in allowed:
        raise DTypeError(
            f"kernel '{name}' takes {', '.join(d.name for d in allowed)}, not {x.dtype.name}"
        )


def _max_infer(ins, attrs):
    x = ins[0]
    _check_input("max_pool2d", x, _NUMERIC)
    g = _geometry("max_pool2d", x.shape, attrs)
    return [OutSpec((*x.shape[:2], *g.out), (x.dtype,))]


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_compute(ins, attrs, outs):
    x = ins[0]
    g = _geometry("max_pool2d", x.shape, attrs)
    taps = g.taps(g.padded(x, _lowest(x.dtype)))
    y = next(taps).copy()
    for tap in taps:
        np.maximum(y, tap, out=y)  # nan propagates, as in torch and ONNX
    return [y]


def _avg_infer(ins, attrs):
    x = ins[0]
    _check_input("avg_pool2d", x, dt.FLOATS)
    g = _geometry("avg_pool2d", x.shape, attrs)
    return [OutSpec((*x.shape[:2], *g.out), (x.dtype,))]


def _avg_compute(ins, attrs, outs):
    x = ins[0]
    g = _geometry("avg_pool2d", x.shape, attrs)
    taps = g.taps(g.padded(x, 0))
    y = next(taps).copy()
    for tap in taps:
        y += tap
    y /= g.counts(attrs["count_include_pad"]).astype(y.dtype)
    return [y]


def _global_infer(ins, attrs):
    x = ins[0]
    require_rank("global_avg_pool2d", "x", x, (4,))
    require_float("global_avg_pool2d", x.dtype)
    if x.shape[2] * x.shape[3] == 0:
        raise ShapeError(f"kernel 'global_avg_pool2d': x has no spatial elements (shape {x.shape})")
    return [OutSpec((*x.shape[:2], 1, 1), (x.dtype,))]


def _pool_cost(ins, outs, attrs):
    kh, kw = attrs["kernel"]
    return streaming_cost(ins, outs, kh * kw)


_COMMON = {
    "kernel": Attr("ints", doc="window size: (rows, cols)"),
    "stride": Attr("ints", (), "step between windows: (rows, cols); () means the kernel size"),
    "padding": Attr("ints", (0, 0, 0, 0), "padding: (top, left, bottom, right)"),
    "ceil_mode": Attr("bool", False, "round the output size up, adding a last partial window"),
    "dilation": Attr("ints", (1, 1), "spacing of window taps"),
}

register(
    KernelDef(
        name="max_pool2d",
        doc="maximum over each (dilated) window of NCHW x; padding never wins",
        inputs=("x",),
        outputs=("y",),
        attrs=_COMMON,
        infer=_max_infer,
        compute=_max_compute,
        cost=_pool_cost,
        reduction=exact,
    )
)

register(
    KernelDef(
        name="avg_pool2d",
        doc="mean over each (dilated) window of NCHW x",
        inputs=("x",),
        outputs=("y",),
        attrs={
            **_COMMON,
            "count_include_pad": Attr(
                "bool", False, "divide by the window size with padding, not the real count"
            ),
        },
        infer=_avg_infer,
        compute=_avg_compute,
        cost=_pool_cost,
        reduction=lambda ins, attrs: math.prod(attrs["kernel"]),
        terms=largest,
    )
)

register(
    KernelDef(
        name="global_avg_pool2d",
        doc="mean over H and W of NCHW x, giving [N, C, 1, 1]",
        inputs=("x",),
        outputs=("y",),
        attrs={},
        infer=_global_infer,
        compute=lambda ins, attrs, outs: [np.mean(ins[0], axis=(2, 3), keepdims=True)],
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs, ins[0].shape[2] * ins[0].shape[3]),
        reduction=lambda ins, attrs: ins[0].shape[2] * ins[0].shape[3],
        terms=largest,
    )
)
