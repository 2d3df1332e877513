"""MN-Core layout notation: how a tensor's axes are spread over the chip's hierarchy.

    ((8_L2B:1, 4:2, 8_L1B:1), (2:1, 4_PE:1, 2_W:1))

One parenthesised group per tensor axis, its factors outermost first, multiplying to the
axis's length. `N_UNIT:S` spreads N along the axis over N instances of a hardware unit
whose indices are S apart (L2B, L1B, MAB, PE, and W: the two words of a long word); `N:S`
keeps N along the axis in each PE's local memory, S long words apart; `N_T` takes N time
slices, the chip holding one slice at a time (a value larger than local memory, see
compiler/time_slice.py). A stride left out is 1 for the first factor of its kind and packs
the later ones after it. `; B@[UNIT, ...]` copies the tensor to every instance of the
listed units. This is the notation of PFN's MN-Core material (tech.preferred.jp
"mn-core-tensor-layout", the MN-Core Challenge problems).

It lives in the device layer because the device's `relayout` kernel reads layouts from its
attributes; the compiler's layout planners build on it (compiler/layout.py re-exports it).

`locate` gives every element's (L2B, L1B, MAB, PE, W, T, address), vectorised.
`parse` checks the text against the device: no unit used past its instance count, no two
elements on one unit instance and address, and the per-PE footprint within local memory.
`fit` says whether a layout describes a tensor of a given shape (a padded layout covers
more). `switch_level` says across which level of the hierarchy elements move when a tensor
changes from one layout to another: what a layout switch costs (device/cost.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError
from .spec import MNCORE2, DeviceSpec

# The most time slices one layout may name: a bound for hostile text only; a compile stops
# long before it, at CODEGEN_MAX_TIME_SLICE (compiler/time_slice.py).
MAX_TIME_SLICES = 1 << 16
# Longest layout text parsed: far more than any real layout, and it keeps hostile text
# (a binary's relayout attributes) from costing more than it is worth to refuse.
MAX_TEXT = 4096


class LayoutError(InvalidArgumentError):
    """Layout notation that does not parse, or that the device cannot hold."""


def unit_counts(spec: DeviceSpec) -> dict[str, tuple[int, str]]:
    """Instances of each unit a layout may spread over, and of what they are counted in."""
    return {
        "L2B": (spec.l2b_count, "on the chip"),
        "L1B": (spec.l1b_per_l2b, "per L2B"),
        "MAB": (spec.mab_per_l1b, "per L1B"),
        "PE": (spec.pe_per_mab, "per MAB"),
        "W": (spec.words_per_long_word, "per long word"),
        "T": (MAX_TIME_SLICES, "time slices at most"),
    }


_FACTOR = re.compile(r"(\d+)(?:_([A-Za-z0-9]+))?(?::(\d+))?")
_BROADCAST = re.compile(r"B@\[([^\]]*)\]")
_AXES = re.compile(r"\([^()]*\)(?:,\([^()]*\))*,?")  # (..), (..), ... with spaces removed


@dataclass(frozen=True)
class Factor:
    count: int
    unit: str | None  # None: long words of one PE's local memory
    stride: int | None  # as written; None when left out

    def __str__(self) -> str:
        unit = f"_{self.unit}" if self.unit else ""
        stride = f":{self.stride}" if self.stride is not None else ""
        return f"{self.count}{unit}{stride}"


@dataclass(frozen=True)
class Layout:
    axes: tuple[tuple[Factor, ...], ...]
    broadcast: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(math.prod(f.count for f in axis) for axis in self.axes)

    def __str__(self) -> str:
        axes = [_tuple(map(str, axis)) for axis in self.axes]
        tail = f"; B@[{', '.join(self.broadcast)}]" if self.broadcast else ""
        return _tuple(axes)[:-1] + tail + ")"

    def strides(self, kind: str | None) -> list[tuple[int, int]]:
        """(count, stride) of every factor of one kind (a unit, or None for addresses), missing
        strides filled in: 1 for the first, then packed after the ones before."""
        out, span = [], 1
        for f in (f for axis in self.axes for f in axis if f.unit == kind):
            stride = f.stride if f.stride is not None else span
            out.append((f.count, stride))
            span = max(span, stride * f.count)
        return out

    def long_words_per_pe(self) -> int:
        """Local-memory long words one PE holds: one past the highest address used."""
        return 1 + sum((c - 1) * s for c, s in self.strides(None))


def locate(layout: Layout, index: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Where elements live, vectorised: for index arrays (one per axis, broadcast together),
    the L2B, L1B, MAB, PE and W (word of the long word) instance, the time slice (T) and
    the local-memory long-word address of each element. Units the layout does not split
    over are 0 (a broadcast unit holds a copy on every instance)."""
    if len(index) != len(layout.axes):
        raise LayoutError(f"layout {layout} has {len(layout.axes)} axes, got {len(index)} indices")
    index = np.broadcast_arrays(*(np.asarray(i, dtype=np.int64) for i in index))
    for axis, (i, n) in enumerate(zip(index, layout.shape)):
        if i.size and (i.min() < 0 or i.max() >= n):
            raise LayoutError(f"layout {layout}: axis {axis} indices must be in 0..{n - 1}")
    kinds = ("L2B", "L1B", "MAB", "PE", "W", "T", None)
    strides = {k: iter(s for _, s in layout.strides(k)) for k in kinds}
    out = {k: np.zeros(index[0].shape, np.int64) for k in kinds}
    for axis, i in zip(layout.axes, index):
        inner = math.prod(f.count for f in axis)
        for f in axis:
            inner //= f.count
            out[f.unit] += (i // inner) % f.count * next(strides[f.unit])
    out["address"] = out.pop(None)
    return out


def _tuple(items) -> str:
    """Python's tuple spelling: a one-item tuple keeps its comma."""
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def parse(text: str, spec: DeviceSpec = MNCORE2, what: str = "layout") -> Layout:
    """A layout from its notation, checked against the device."""
    if len(str(text)) > MAX_TEXT:
        raise LayoutError(f"{what}: {len(str(text))} characters, more than a layout's {MAX_TEXT}")
    s = "".join(str(text).split())
    if not (s.startswith("(") and s.endswith(")")):
        raise LayoutError(
            f"{what} {text!r}: a layout is a parenthesised list of axes, "
            "e.g. ((8_L2B:1, 4:2, 8_L1B:1), (2:1, 4_PE:1, 2_W:1))"
        )
    body, broadcast = s[1:-1], ()
    if ";" in body:
        body, tail = body.split(";", 1)
        m = _BROADCAST.fullmatch(tail)
        if m is None:
            raise LayoutError(f"{what} {text!r}: after ';' expected B@[UNIT, ...], got {tail!r}")
        broadcast = tuple(u for u in m.group(1).split(",") if u)
    groups = re.findall(r"\(([^()]*)\)", body)
    if _AXES.fullmatch(body) is None:
        raise LayoutError(
            f"{what} {text!r}: expected axes like (8_L2B:1, 4:2), separated by commas"
        )
    units = unit_counts(spec)
    axes = []
    for g in groups:
        factors = []
        for token in (t for t in g.split(",") if t):
            m = _FACTOR.fullmatch(token)
            if m is None:
                raise LayoutError(
                    f"{what} {text!r}: factor {token!r} is not N, N:STRIDE, N_UNIT or N_UNIT:STRIDE"
                )
            count, unit, stride = int(m.group(1)), m.group(2), m.group(3)
            if unit is not None and unit not in units:
                raise LayoutError(
                    f"{what} {text!r}: unknown unit {unit!r} in {token!r}; units "
                    f"are {', '.join(units)}"
                )
            if count < 1 or (stride is not None and int(stride) < 1):
                raise LayoutError(f"{what} {text!r}: {token!r} needs a count and stride >= 1")
            factors.append(Factor(count, unit, None if stride is None else int(stride)))
        if not factors:
            raise LayoutError(f"{what} {text!r}: an axis has no factors")
        axes.append(tuple(factors))
    for u in broadcast:
        if u not in units:
            raise LayoutError(f"{what} {text!r}: cannot broadcast over unknown unit {u!r}")
    layout = Layout(tuple(axes), broadcast)
    _check_fits_device(layout, spec, text, what)
    return layout


def _overlaps(pairs: list[tuple[int, int]]) -> bool:
    """Whether two index combinations of (count, stride) factors give the same offset."""
    count, span = math.prod(c for c, _ in pairs), 1 + sum((c - 1) * s for c, s in pairs)
    if count > span:
        return True  # more combinations than offsets: two must meet (and none are listed)
    offsets = [0]
    for c, s in pairs:
        offsets = [o + i * s for o in offsets for i in range(c)]
    return len(set(offsets)) != len(offsets)


def _check_fits_device(layout: Layout, spec: DeviceSpec, text: str, what: str) -> None:
    where = f"{what} {text!r}:"
    for unit, (total, per) in unit_counts(spec).items():
        pairs = layout.strides(unit)
        if pairs and unit in layout.broadcast:
            raise LayoutError(f"{where} {unit} is both split over and broadcast")
        highest = sum((c - 1) * s for c, s in pairs)
        if highest >= total:
            raise LayoutError(
                f"{where} reaches {unit} index {highest}, but there are {total} {per}"
            )
        if _overlaps(pairs):
            raise LayoutError(
                f"{where} two elements land on the same {unit}; "
                "give its factors strides that do not overlap"
            )
    need = layout.long_words_per_pe() * spec.words_per_long_word * 4
    if need > spec.lm_bytes_per_pe:
        raise LayoutError(
            f"{where} needs {need} bytes of local memory per PE, more than its "
            f"{spec.lm_bytes_per_pe}; spread the tensor over more units"
        )
    if _overlaps(layout.strides(None)):
        raise LayoutError(
            f"{where} two elements share a local-memory address; "
            "give the N:STRIDE factors strides that do not overlap"
        )


def fit(layout: Layout, shape: tuple[int, ...], padded: bool = False) -> str | None:
    """Why `layout` cannot describe a tensor of `shape`, or None when it can. A `padded`
    layout may cover more along an axis than the tensor has (the mapping of a matrix kernel
    pads its operands to whole tiles); the elements past the tensor's end are padding."""
    if len(layout.axes) != len(shape):
        return f"rank {len(shape)}, the layout has {len(layout.axes)} axes"
    covered = layout.shape
    if padded and all(c >= n for c, n in zip(covered, shape)):
        return None
    if covered != tuple(shape):
        more = " or more" if padded else ""
        return f"shape {tuple(shape)}, the layout covers {covered}{more}"
    return None


# The memory elements cross when they move between instances of a unit: within a PE (its
# local memory), between PEs of one L1B (L1BM), between L1Bs (L2BM). Innermost first.
LEVELS = ("LM", "L1BM", "L2BM")
_LEVEL_OF = {"L2B": "L2BM", "L1B": "L2BM", "MAB": "L1BM", "PE": "L1BM", "W": "LM", "T": "LM"}


def switch_level(src: Layout, dst: Layout, shape: tuple[int, ...]) -> str | None:
    """The outermost memory level (of `LEVELS`) some element of a `shape` tensor crosses
    when it changes from layout `src` to `dst`, or None when no element moves. Where an
    element lives is a sum of one term per axis (`locate`), so comparing the layouts one
    axis at a time, the others at index 0, compares them on every element."""
    for lay in (src, dst):
        why = fit(lay, shape, padded=True)
        if why is not None:
            raise LayoutError(f"layout {lay} cannot hold a tensor of {why}")
    moved: set[str] = set()
    for u in set(src.broadcast) ^ set(dst.broadcast):
        moved.add(_LEVEL_OF.get(u, "L2BM"))
    for axis, n in enumerate(shape):
        index = [np.arange(n) if a == axis else np.zeros(1, np.int64) for a in range(len(shape))]
        a, b = locate(src, index), locate(dst, index)
        moved.update(
            _LEVEL_OF.get(kind, "LM") for kind in a if not np.array_equal(a[kind], b[kind])
        )
    return max(moved, key=LEVELS.index, default=None)
