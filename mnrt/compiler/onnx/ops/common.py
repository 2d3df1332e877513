"""Helpers that several op families share: axes, windows of Conv and pools, 4-D views, padding."""

from __future__ import annotations

from typing import Any

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, axis_index


def optional_input(node: Any, index: int) -> str | None:
    """The name of a node's optional input `index`, None where the node leaves it out (too
    few inputs, or an empty name in its place)."""
    return node.input[index] if len(node.input) > index and node.input[index] else None


def legacy_broadcast(cx: Ctx, at: Attrs, a: Symbol, b: Symbol) -> Symbol:
    """Opset < 7 binary ops: `broadcast=1, axis=k` aligns b with a's axis k."""
    if at.get("broadcast", 0) and at.has("axis"):
        ra, sb = len(cx.shape(a)), cx.shape(b)
        axis = axis_index(at.get("axis"), ra)
        b = cx.reshape(b, (*sb, *([1] * (ra - axis - len(sb)))))
    return b


def axes_of(cx: Ctx, node: Any, at: Attrs, input_index: int = 1) -> list[int] | None:
    """Axes from the attribute (old opsets) or from an optional constant input."""
    if at.has("axes"):
        return [int(a) for a in at.get("axes")]
    at.get("axes")
    if len(node.input) > input_index and node.input[input_index]:
        return cx.ints(node.input[input_index], "axes")
    return None


class Window:
    """Per-spatial-axis kernel, stride, dilation and begin/end padding of a Conv or pool."""

    def __init__(self, at: Attrs, size: tuple[int, ...], kernel: list[int]) -> None:
        r = len(size) - 2
        self.kernel = list(kernel)
        self.stride = list(at.get("strides") or [1] * r)
        self.dilation = list(at.get("dilations") or [1] * r)
        auto = at.get("auto_pad", "NOTSET")
        pads = (at.get("pads") if auto == "NOTSET" else None) or [0] * (2 * r)
        check_window(r, self.kernel, self.stride, self.dilation, list(pads))
        if auto in ("NOTSET", "VALID"):
            self.begin, self.end = list(pads[:r]), list(pads[r:])
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            self.begin, self.end = [], []
            for n, k, s, d in zip(size[-r:], self.kernel, self.stride, self.dilation):
                total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
                self.begin.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
                self.end.append(total - self.begin[-1])
        else:
            raise Unsupported(f"auto_pad={auto}")

    def attrs2d(self, axes: slice = slice(None), rows: bool = False) -> dict:
        """The device attributes for the spatial axes `axes` (one or two of them); one axis
        becomes the columns of the 2-D window, or its rows when `rows`."""
        k, s, d = self.kernel[axes], self.stride[axes], self.dilation[axes]
        b, e = self.begin[axes], self.end[axes]
        if len(k) == 1 and rows:
            k, s, d, b, e = [*k, 1], [*s, 1], [*d, 1], [*b, 0], [*e, 0]
        elif len(k) == 1:
            k, s, d, b, e = [1, *k], [1, *s], [1, *d], [0, *b], [0, *e]
        return {"kernel": k, "stride": s, "dilation": d, "padding": [b[0], b[1], e[0], e[1]]}


def check_window(r: int, kernel: list, stride: list, dilation: list, pads: list) -> None:
    """One kernel size, stride and dilation per spatial axis, two pads: a wrong length would
    otherwise pool or convolve over other axes than the model says, or fail as an IndexError."""
    for what, v, n in (("kernel_shape", kernel, r), ("strides", stride, r),
                       ("dilations", dilation, r), ("pads", pads, 2 * r)):  # fmt: skip
        if len(v) != n:
            raise Invalid(f"{what} {list(v)} has {len(v)} values; the input has {r} spatial "
                           f"dimensions, so it needs {n}")  # fmt: skip
    for what, v in (("kernel_shape", kernel), ("strides", stride), ("dilations", dilation)):
        if any(int(d) < 1 for d in v):
            raise Invalid(f"{what} {list(v)} must hold sizes >= 1")
    if any(int(p) < 0 for p in pads):
        raise Invalid(f"pads {list(pads)} must not be negative")


def as4d(cx: Ctx, x: Symbol) -> Symbol:
    """N,C,L as N,C,1,L so that a 2-D kernel applies."""
    s = cx.shape(x)
    return cx.reshape(x, (s[0], s[1], 1, s[2])) if len(s) == 3 else x


def spatial_rank(cx: Ctx, x: Symbol, what: str, allowed: tuple[int, ...] = (1, 2)) -> int:
    rank = len(cx.shape(x)) - 2
    if rank not in allowed:
        raise Unsupported(f"{what} over {rank} spatial dimensions")
    return rank


def from4d(cx: Ctx, y: Symbol, rank: int) -> Symbol:
    if rank == 1:
        s = cx.shape(y)
        return cx.reshape(y, (s[0], s[1], s[3]))
    return y


def refuse_output(node: Any, index: int, name: str, why: str) -> None:
    """Refuse an optional output by its ONNX name when the model uses it (an empty name,
    or none at that position, means the model does not ask for it)."""
    if len(node.output) > index and node.output[index]:
        raise Unsupported(f"its output {name} ('{node.output[index]}') is not supported: {why}")


def pad_axis(cx: Ctx, x: Symbol, ax: int, before: int, after: int, mode: str,
              value: float) -> Symbol:  # fmt: skip
    if before < 0 or after < 0:
        dim = cx.shape(x)[ax]
        if dim + min(before, 0) + min(after, 0) < 0:
            raise Invalid(f"negative pads {before}, {after} remove more than the {dim} "
                           f"elements of axis {ax}")  # fmt: skip
        x = cx.op("slice", x, starts=[max(-before, 0)], ends=[dim - max(-after, 0)], axes=[ax])
        before, after = max(before, 0), max(after, 0)
    if not before and not after:
        return x
    dim = cx.shape(x)[ax]

    def piece(count: int, at_start: bool) -> Symbol:
        shape = list(cx.shape(x))
        if mode == "constant":
            shape[ax] = count
            return cx.op("fill", shape=shape, value=value, dtype=cx.dtype(x).name)
        if mode == "edge":
            edge = cx.op("slice", x, starts=[0 if at_start else dim - 1],
                         ends=[1 if at_start else dim], axes=[ax])  # fmt: skip
            shape[ax] = count
            return cx.op("expand", edge, shape=shape)
        if count >= dim:
            raise Unsupported("reflect padding as wide as the axis")
        if at_start:
            return cx.op("slice", x, starts=[count], ends=[0], axes=[ax], steps=[-1])
        end = dim - 2 - count if dim - 2 - count >= 0 else -dim - 1  # -1 would mean the last
        return cx.op("slice", x, starts=[dim - 2], ends=[end], axes=[ax], steps=[-1])

    parts = ([piece(before, True)] if before else []) + [x]
    parts += [piece(after, False)] if after else []
    return cx.op("concat", *parts, axis=ax)
