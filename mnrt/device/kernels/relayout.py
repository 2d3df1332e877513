"""relayout: a layout switch, one on-chip tensor moved from one MN-Core layout to another.

The layout planners (compiler/layout_planners/) insert it where a value's producer leaves it
in one layout and a consumer needs another. The emulated device keeps tensors as dense
row-major arrays whatever their layout, so it computes the identity copy (results are
bitwise unchanged); its price is the move (device/cost.py): the tensor's bytes once over
the outermost memory level the two layouts differ at.

Its attributes come from binaries too, so they are checked in full before anything reads
them: each must parse as a layout the device can hold, and both must cover the tensor.
"""

from __future__ import annotations

import functools

from ...errors import KernelAttributeError
from ..layout import Layout, LayoutError, fit, parse, switch_level
from .registry import REQUIRED, Attr, Cost, KernelDef, OutSpec, exact, register


@functools.lru_cache(maxsize=1024)
def _layout(text: str, name: str) -> Layout:
    try:
        return parse(text, what=f"kernel 'relayout': attribute '{name}'")
    except LayoutError as e:
        raise KernelAttributeError(str(e)) from None


def _validate(attrs) -> None:
    _layout(attrs["src"], "src")
    _layout(attrs["dst"], "dst")


def _layouts(shape: tuple[int, ...], attrs) -> tuple[Layout, Layout]:
    out = []
    for name in ("src", "dst"):
        layout = _layout(attrs[name], name)
        why = fit(layout, shape, padded=True)
        if why is not None:
            raise KernelAttributeError(
                f"kernel 'relayout': attribute '{name}' {attrs[name]!r} cannot hold x of {why}"
            )
        out.append(layout)
    return out[0], out[1]


@functools.lru_cache(maxsize=1024)
def level(src: str, dst: str, shape: tuple[int, ...]) -> str | None:
    """The memory level a switch from `src` to `dst` moves a `shape` tensor over (None: no
    element moves); layouts checked as the kernel checks them."""
    a, b = _layouts(shape, {"src": src, "dst": dst})
    return switch_level(a, b, shape)


def _infer(ins, attrs):
    x = ins[0]
    _layouts(tuple(x.shape), attrs)
    return [OutSpec(tuple(x.shape), (x.dtype,))]


_FIELD = {"LM": "lm_bytes", "L1BM": "sram_bytes", "L2BM": "l2bm_bytes"}


def _cost(ins, outs, attrs) -> Cost:
    x = ins[0]
    where = level(attrs["src"], attrs["dst"], tuple(x.shape))
    moved = {_FIELD[where]: float(x.nbytes)} if where else {}
    return Cost(flops=0.0, dram_bytes=0.0, traffic=(0.0, 0.0), **moved)


register(
    KernelDef(
        name="relayout",
        doc="layout switch: x moved from layout src to layout dst on chip (values unchanged)",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "src": Attr("str", REQUIRED, "MN-Core layout x is in, e.g. ((8_L2B:1), (4_PE:1))"),
            "dst": Attr("str", REQUIRED, "MN-Core layout y is to be in"),
        },
        infer=_infer,
        compute=lambda ins, attrs, outs: [ins[0]],
        cost=_cost,
        reduction=exact,
        validate=_validate,
    )
)
