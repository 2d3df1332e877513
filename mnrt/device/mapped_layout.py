"""Which layout a tensor has on chip: for a matrix kernel, the one its mapping implies; for
anything else, the canonical row-major spread over the PEs.

A mapping (device/mapping.py) splits a matrix product over a PE grid (pe_b, pe_m, pe_n,
pe_k), folded onto the hierarchy L2B x L1B x MAB x PE innermost first (`Mapping.hierarchy`):
the grid's linear index is ((b pe_m + m) pe_n + n) pe_k + k, and its low bits pick the PE of
a MAB, the next the MAB of an L1B, then the L1B and the L2B. An operand is spread over the
grid dimensions it has: a gemm's a [M, K] over (b, m, k), b [K, N] over (b, k, n), the result
[M, N] over (b, m, n); a conv's image over (batch, input channels, rows), its weights over
(output channels, input channels), its result over (batch, output channels, rows). Along a
split axis each grid index holds one contiguous block (`spread`): the axis is padded to a
whole number of blocks (as the mapping pads M, N and K to whole tiles) and the layout says
so honestly: it covers the padded length (`fit(..., padded=True)`). A dimension the operand
lacks (a's n) leaves it on the grid's n = 0 slice; the kernel's L1BM broadcast, priced in its
mapping, brings it to the others. Grid dimensions that are not powers of two are padded to
one (idle PEs), so each splits cleanly into unit digits; a grid that then exceeds the chip
has no layout (LayoutError).

Inside a PE the block is kept row-major in local memory, two 4-byte-or-smaller items to a
long word (the `W` unit) where the innermost count is even; a block larger than local
memory gets time slices (`N_T`) on its largest axis, padded to a whole number of slices
(less than one slice of padding: as few slices as the slice size that fits needs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping as MappingABC
from collections.abc import Sequence

from .kernels.registry import TensorSpec
from .layout import Factor, Layout, LayoutError
from .mapping import PROBLEMS, Mapping
from .spec import MNCORE2, DeviceSpec

Grid = Sequence[tuple[int | None, int]]  # (tensor axis or None, count), outermost first


def _log2_pow2(n: int) -> int:
    """Bits of n rounded up to a power of two."""
    return max(0, (n - 1).bit_length())


def _unit_bits(spec: DeviceSpec) -> list[tuple[str, int, int]]:
    """(unit, lowest bit, bits) of the linear PE index, innermost unit first."""
    out, lo = [], 0
    for unit, count in (
        ("PE", spec.pe_per_mab),
        ("MAB", spec.mab_per_l1b),
        ("L1B", spec.l1b_per_l2b),
        ("L2B", spec.l2b_count),
    ):
        bits = _log2_pow2(count)
        if 1 << bits != count:
            raise LayoutError(f"a {unit} count of {count} is not a power of two")
        out.append((unit, lo, bits))
        lo += bits
    return out


def spread(shape: Sequence[int], grid: Grid, itemsize: int, spec: DeviceSpec = MNCORE2) -> Layout:
    """The layout of a `shape` tensor spread block-wise over a PE grid: `grid` lists the
    grid's dimensions outermost first, each with the tensor axis it splits (None: one the
    tensor lacks, which it sits at index 0 of) and its count. Raises LayoutError for a
    tensor without elements or a grid larger than the chip."""
    shape = tuple(int(n) for n in shape)
    if not shape or any(n < 1 for n in shape):
        raise LayoutError(f"a tensor of shape {shape} has no elements to lay out")
    units = _unit_bits(spec)
    total = sum(_log2_pow2(c) for _, c in grid)
    if total > sum(bits for _, _, bits in units):
        raise LayoutError(
            f"a grid of {' x '.join(str(c) for _, c in grid)} needs {1 << total} PEs, "
            f"the chip has {spec.pe_count}"
        )
    unit_factors: list[list[Factor]] = [[] for _ in shape]
    blocks = [1] * len(shape)
    lo = 0
    for axis, count in reversed(grid):  # innermost grid dimension in the lowest bits
        bits = _log2_pow2(count)
        if axis is not None:
            if blocks[axis] != 1:
                raise LayoutError(f"axis {axis} is split by two grid dimensions")
            blocks[axis] = 1 << bits
            pieces = []
            for unit, ulo, ubits in units:
                a, b = max(lo, ulo), min(lo + bits, ulo + ubits)
                if b > a:
                    pieces.append((a, Factor(1 << (b - a), unit, 1 << (a - ulo))))
            unit_factors[axis] = [f for _, f in sorted(pieces, key=lambda p: -p[0])]
        lo += bits
    inner = [-(-n // b) for n, b in zip(shape, blocks)]
    words = spec.words_per_long_word if itemsize * spec.words_per_long_word <= 8 else 1
    pair = words > 1 and inner[-1] % words == 0
    address = list(inner)
    if pair:
        address[-1] //= words
    slices = [1] * len(shape)
    lm_words = spec.lm_bytes_per_pe // 8
    while math.prod(address) > lm_words:
        need = -(-math.prod(address) // lm_words)
        axis = max(range(len(shape)), key=lambda a: (address[a], -a))
        size = -(-address[axis] // min(need, address[axis]))  # per slice, to fit
        slices[axis] *= -(-address[axis] // size)  # the slices that size needs, no more
        address[axis] = size
    axes = []
    for a in range(len(shape)):
        factors = list(unit_factors[a])
        if slices[a] > 1:
            factors.append(Factor(slices[a], "T", None))
        if address[a] > 1 or not (factors or (a == len(shape) - 1 and pair)):
            factors.append(Factor(address[a], None, None))
        if a == len(shape) - 1 and pair:
            factors.append(Factor(words, "W", None))
        axes.append(factors)
    return Layout(tuple(tuple(f) for f in _row_major_strides(axes)))


def _row_major_strides(axes: list[list[Factor]]) -> list[list[Factor]]:
    """Local-memory addresses and time slices numbered row-major (the last axis innermost),
    with their strides written out: a stride left out would number them the other way."""
    for kind in (None, "T"):
        span = 1
        for factors in reversed(axes):
            for i in reversed(range(len(factors))):
                f = factors[i]
                if f.unit == kind:
                    factors[i] = Factor(f.count, kind, span)
                    span *= f.count
    return axes


def row_major(shape: Sequence[int], itemsize: int, spec: DeviceSpec = MNCORE2) -> Layout:
    """The canonical layout: the outermost axes split block-wise over the chip's PEs, the
    rest row-major in local memory. An axis takes the largest power of two of PEs it
    divides into, unless padding it to a larger power (at most its own length) would use
    at least twice the PEs: 65 rows go to 64 PEs two apiece (the last 63 padding), not to
    one PE. What the legacy planner keeps every on-chip value in."""
    left, grid = spec.pe_count, []
    for axis, n in enumerate(shape):
        n = int(n)
        if n < 1:
            count = 1
        else:
            floor = 1 << (min(n, left).bit_length() - 1)
            exact = math.gcd(n, left)
            count = exact if 2 * exact > floor else floor
        grid.append((axis, count))
        left //= count
    return spread(shape, grid, itemsize, spec)


def _grid(mp: Mapping, roles: Sequence[str | None]) -> list[tuple[int | None, int]]:
    """The grid (b, m, n, k) with the tensor axis each dimension splits."""
    counts = {"b": mp.pe_b, "m": mp.pe_m, "n": mp.pe_n, "k": mp.pe_k}
    where = {r: a for a, r in enumerate(roles) if r is not None}
    return [(where.get(r), counts[r]) for r in ("b", "m", "n", "k")]


def _batch_axis(shape: Sequence[int], out_shape: Sequence[int]) -> int | None:
    """The axis of `shape` that the batch split of a batched gemm falls on: the largest of
    the result's batch axes, counted from the end, if this operand has it at full size."""
    batch = out_shape[:-2]
    if not batch:
        return None
    pick = max(range(len(batch)), key=lambda a: (batch[a], -a)) - len(out_shape)
    return len(shape) + pick if -pick <= len(shape) and shape[pick] == out_shape[pick] else None


def _gemm_roles(ins, outs, attrs) -> list[list[str | None] | None]:
    out = outs[0].shape
    roles: list[list[str | None] | None] = []
    for pos, t in enumerate(ins):
        if t is None:
            roles.append(None)
            continue
        r: list[str | None] = [None] * len(t.shape)
        last = {0: ("m", "k"), 1: ("k", "n"), 2: ("m", "n")}[pos]
        if (pos == 0 and attrs.get("trans_a")) or (pos == 1 and attrs.get("trans_b")):
            last = last[::-1]
        for off, role in zip((-2, -1), last):
            if len(t.shape) >= -off and (pos < 2 or t.shape[off] > 1):
                r[off] = role
        b = _batch_axis(t.shape, out)
        if b is not None and len(t.shape) > 2:
            r[b] = "b"
        roles.append(r)
    r = [None] * len(out)
    r[-2], r[-1] = "m", "n"
    b = _batch_axis(out, out)
    if b is not None:
        r[b] = "b"
    return [*roles, r]


def _conv_roles(ins, outs, attrs) -> list[list[str | None] | None]:
    b = "b" if attrs.get("groups", 1) == 1 else None  # grouped: batch x groups, not split
    roles: list[list[str | None]] = [[b, "k", "n", None], ["m", "k", None, None], ["m"]]
    return [r if t is not None else None for r, t in zip(roles, ins)] + [[b, "m", "n", None]]


def _conv_transpose_roles(ins, outs, attrs) -> list[list[str | None] | None]:
    """x's pixels are the product's n and its channels k; w's channels k and its output
    channels (with the taps) m; the result's channels m, its pixels scattered from n."""
    b = "b" if attrs.get("groups", 1) == 1 else None
    roles: list[list[str | None]] = [[b, "k", "n", None], ["k", "m", None, None], ["m"]]
    return [r if t is not None else None for r, t in zip(roles, ins)] + [[b, "m", "n", None]]


_ROLES = {"gemm": _gemm_roles, "conv2d": _conv_roles, "conv_transpose2d": _conv_transpose_roles}


def mapping_layouts(
    op: str,
    ins: Sequence[TensorSpec | None],
    outs: Sequence[TensorSpec],
    attrs: MappingABC,
    spec: DeviceSpec = MNCORE2,
) -> list[Layout | None]:
    """The layout each operand (inputs, then outputs) of a mapped matrix kernel has while it
    runs, as its `mapping` attribute spreads it; None for an absent optional input or a
    tensor without elements. Raises LayoutError when the mapping's grid has no layout."""
    if op not in PROBLEMS or op not in _ROLES:
        raise LayoutError(f"kernel '{op}' has no mapping to derive layouts from")
    mp = Mapping.from_attr(attrs["mapping"])
    out: list[Layout | None] = []
    for t, roles in zip([*ins, *outs], _ROLES[op](ins, outs, attrs)):
        if t is None or roles is None or not t.shape or t.size == 0:
            out.append(None)
            continue
        out.append(spread(t.shape, _grid(mp, roles), t.dtype.itemsize, spec))
    return out
