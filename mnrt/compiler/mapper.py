"""The Pareto mapper: the best mappings of a matrix kernel (or a producer-consumer chain)
over `Metrics.LATENCY | ENERGY | RESOURCE_USAGE`, with the reasons the others lost.

Names follow AccelForge's Fast and Fusiest Mapper (FFM): the front keeps every mapping no
other beats on all chosen metrics; `objective_tolerance` (latency, energy) and
`resource_usage_tolerance` (usage) let a point be dropped when another is within that
relative margin of it on every metric, trading a slightly worse front for a smaller one.

The search is exact over the space of its `effort` (`space`): a branch and bound that
fixes the PE grid, then the accumulator block, then the K slab and resident operand,
skipping every subtree whose lower bound (no padding, fewest DRAM bytes, smallest slab) a
point of the front already dominates, and every accumulator block that cannot fit its
memory before any K slab is tried. It finds the same optimum as evaluating the whole space
(benchmarks/bench_mapper.py counts both) with far fewer full evaluations. Spaces of higher
effort contain those of lower effort, so a higher preset never models slower.

Every point is runnable: `MappedPoint.kernels` gives the kernels with the mapping attribute
(and, for a fused chain, the intermediate kept on chip); running them models exactly the
point's figures. `Front.explain` lists the best rejected alternatives and what ruled each
out: a resource it does not fit, or the metric on which a kept point beats it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Sequence
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field

from ..device import cost as cost_model
from ..device.kernels import lookup
from ..device.kernels.registry import TensorSpec
from ..device.mapping import (
    GRF,
    KEEP_A,
    KEEP_B,
    KEEP_NONE,
    LM,
    PROBLEMS,
    Evaluation,
    Mapping,
    Problem,
    capacities,
    check,
    evaluate,
    problem_of,
)
from ..device.spec import MNCORE2, DeviceSpec
from ..errors import InvalidArgumentError
from ..host import Kernel

MAX_EFFORT = 4
_EXPLAINED = 8  # rejected alternatives Front.explain lists


class Metrics(enum.Flag):
    """What the mapper minimises (FFM's names)."""

    LATENCY = enum.auto()
    ENERGY = enum.auto()
    RESOURCE_USAGE = enum.auto()


class MapperError(InvalidArgumentError):
    """A kernel the mapper cannot map, or a bad mapper argument."""


@dataclass(frozen=True)
class MappedPoint:
    """One mapping on the front, with what it models to."""

    mapping: Mapping
    time_s: float
    energy_j: float
    usage: float
    bound: str
    fused: bool = False
    chain: tuple[Kernel, ...] = ()

    def metric(self, m: Metrics) -> float:
        return {Metrics.LATENCY: self.time_s, Metrics.ENERGY: self.energy_j}.get(m, self.usage)

    @property
    def kernels(self) -> list[Kernel]:
        """The kernel(s) as a program runs them with this mapping."""
        first, *rest = self.chain
        attrs = {**first.attrs, "mapping": self.mapping.to_attr()}
        if not self.fused:
            return [Kernel(first.op, first.inputs, first.outputs, attrs), *rest]
        consumer = rest[0]
        out_pos = len(first.inputs)  # the producer's output, after its inputs
        in_pos = list(consumer.inputs).index(first.outputs[0])
        return [
            Kernel(first.op, first.inputs, first.outputs, {**attrs, "onchip": (out_pos,)}),
            Kernel(consumer.op, consumer.inputs, consumer.outputs,
                   {**consumer.attrs, "onchip": (in_pos,)}),
            *rest[1:],
        ]  # fmt: skip


@dataclass(frozen=True)
class Rejected:
    """A mapping the search turned down, and why: the resource or metric that ruled it out."""

    mapping: Mapping
    reason: str
    time_s: float  # what it models to, or a lower bound for one no memory can hold
    fused: bool = False


@dataclass
class Front:
    """The Pareto front of one kernel, and what the search did to find it."""

    points: list[MappedPoint]
    metrics: Metrics
    evaluated: int = 0
    space_size: int = 0
    rejected: list[Rejected] = field(default_factory=list)

    @property
    def best(self) -> MappedPoint:
        """The point a compile runs: lowest latency if asked for, else the first metric's."""
        first = next(m for m in (Metrics.LATENCY, Metrics.ENERGY, Metrics.RESOURCE_USAGE)
                     if m in self.metrics)  # fmt: skip
        return min(self.points, key=lambda p: (p.metric(first), p.energy_j, p.usage))

    def explain(self, shown: int = _EXPLAINED) -> str:
        """The chosen mapping, the rest of the front, and the best rejected alternatives with
        the resource or metric that ruled each out."""
        best = self.best
        lines = [
            f"chosen: {best.mapping}{' fused' if best.fused else ''}: "
            f"{best.time_s * 1e6:.3f} us, {best.energy_j * 1e3:.4f} mJ, usage {best.usage:.2f} "
            f"({best.bound}-bound)",
            f"searched {self.evaluated} of {self.space_size} mappings; front of {len(self.points)}",
        ]
        for p in self.points:
            if p is not best:
                lines.append(
                    f"  front: {p.mapping}{' fused' if p.fused else ''}: {p.time_s * 1e6:.3f} us, "
                    f"{p.energy_j * 1e3:.4f} mJ, usage {p.usage:.2f}"
                )
        # The best few of each kind of reason: every resource and metric that ruled one out.
        kinds: dict[str, list[Rejected]] = {}
        for r in sorted(self.rejected, key=lambda r: r.time_s):
            kind = r.reason.split(":")[0].split(" by ")[0]
            kinds.setdefault(kind, [])
            if len(kinds[kind]) < max(1, shown // 4):
                kinds[kind].append(r)
        picked = sorted((r for rs in kinds.values() for r in rs), key=lambda r: r.time_s)
        for r in picked[:shown]:
            lines.append(
                f"  rejected: {r.mapping}{' fused' if r.fused else ''} "
                f"({r.time_s * 1e6:.3f} us): {r.reason}"
            )
        return "\n".join(lines)


# ---- the space ---------------------------------------------------------------------------
def _pow2_upto(limit: int, start: int = 1) -> list[int]:
    out, v = [], start
    while v <= max(limit, start):
        out.append(v)
        v *= 2
    return out


def _next_pow2(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(x, 1))))


def default_mapping(spec: DeviceSpec, p: Problem) -> Mapping:
    """The mapping of a compile that does not search (O0): 4x4 accumulator blocks in LM,
    16-deep K slabs, the PE array split evenly over rows and columns."""
    pe_m = min(_next_pow2(math.ceil(p.m / 4)), math.isqrt(spec.pe_count))
    pe_n = min(_next_pow2(math.ceil(p.n / 4)), spec.pe_count // pe_m)
    return Mapping(1, pe_m, pe_n, 1, 4, 4, min(16, _next_pow2(p.k)), LM, KEEP_NONE)


def _grids(spec: DeviceSpec, p: Problem, effort: int) -> list[tuple[int, int, int, int]]:
    """(pe_b, pe_m, pe_n, pe_k) choices: no more PEs along a dimension than it has 4-element
    rows (more would only idle)."""
    if effort <= 1:
        d = default_mapping(spec, p)
        grids = {(1, d.pe_m, d.pe_n, 1)}
        if effort == 1:  # the whole array over rows and columns, in balanced shapes
            for pe_m in _pow2_upto(min(spec.pe_count, _next_pow2(math.ceil(p.m / 4)))):
                pe_n = min(spec.pe_count // pe_m, _next_pow2(math.ceil(p.n / 4)))
                grids.add((1, pe_m, pe_n, 1))
        return sorted(grids)
    out = []
    for pe_b in _pow2_upto(min(spec.pe_count, _next_pow2(p.batch))):
        for pe_m in _pow2_upto(min(spec.pe_count // pe_b, _next_pow2(math.ceil(p.m / 4)))):
            left = spec.pe_count // (pe_b * pe_m)
            for pe_n in _pow2_upto(min(left, _next_pow2(math.ceil(p.n / 4)))):
                limit = min(left // pe_n, _next_pow2(math.ceil(p.k / 4)))
                out += [(pe_b, pe_m, pe_n, pe_k) for pe_k in _pow2_upto(limit)]
    return out


def _blocks(p: Problem, effort: int) -> list[tuple[int, int, int]]:
    """(reg_m, reg_n, accum) choices."""
    out = [(4, 4, LM)]
    if effort >= 1:
        top = 64 if effort >= 3 else 32
        regs_m = _pow2_upto(min(top, _next_pow2(p.m)), 4)
        regs_n = _pow2_upto(min(top, _next_pow2(p.n)), 4)
        accums = (GRF, LM) if effort >= 3 else (GRF,)
        pairs = [(rm, rn) for rm in regs_m for rn in regs_n]
        if effort == 1:
            pairs = [(r, r) for r in regs_m if r in regs_n] or [(4, 4)]
        out += [(rm, rn, a) for rm, rn in pairs for a in accums if (rm, rn, a) != (4, 4, LM)]
    return out


def _slabs(p: Problem, effort: int, default_k: int) -> list[tuple[int, int]]:
    """(tile_k, keep) choices."""
    if effort == 0:
        return [(default_k, KEEP_NONE)]
    ks = sorted({default_k, *_pow2_upto(min(_next_pow2(p.k), 1024), 4)})
    if effort == 1:
        ks = sorted({default_k, *(k for k in (32, 64, 128) if k <= _next_pow2(p.k))})
    keeps = (KEEP_NONE, KEEP_A, KEEP_B) if effort >= 3 else (KEEP_NONE,)
    return [(k, keep) for k in ks for keep in keeps]


def space(spec: DeviceSpec, p: Problem, effort: int) -> Iterator[Mapping]:
    """Every mapping of `effort`'s space (what brute force evaluates)."""
    d = default_mapping(spec, p)
    for grid in _grids(spec, p, effort):
        for rm, rn, acc in _blocks(p, effort):
            for k, keep in _slabs(p, effort, d.tile_k):
                yield Mapping(*grid, rm, rn, k, acc, keep)


def space_size(spec: DeviceSpec, p: Problem, effort: int) -> int:
    d = default_mapping(spec, p)
    return len(_grids(spec, p, effort)) * len(_blocks(p, effort)) * len(_slabs(p, effort, d.tile_k))


# ---- the search --------------------------------------------------------------------------
class _Vec(tuple):
    """(time_s, energy_j, usage), indexed by _INDEX[metric]."""

    @property
    def time_s(self) -> float:
        return self[0]

    def metric(self, m: int) -> float:
        return self[m]


_INDEX = {Metrics.LATENCY: 0, Metrics.ENERGY: 1, Metrics.RESOURCE_USAGE: 2}


def _chosen(metrics: Metrics) -> list[Metrics]:
    return [m for m in (Metrics.LATENCY, Metrics.ENERGY, Metrics.RESOURCE_USAGE) if m in metrics]


class _Search:
    def __init__(self, spec, p, metrics, obj_tol, use_tol, onchip, consumer):
        self.spec, self.p = spec, p
        self.metrics = [_INDEX[m] for m in _chosen(metrics)]
        self.tol = {i: (use_tol if i == 2 else obj_tol) for i in self.metrics}
        self.names = {i: m.name.lower() for m, i in _INDEX.items()}
        self.onchip, self.consumer = onchip, consumer
        self.front: list[tuple[_Vec, Mapping, Evaluation, bool]] = []
        self.rejected: list[Rejected] = []
        self.evaluated = 0
        self.ties = False  # breaking latency ties by energy (see break_ties)
        # What lower_bound's operand traffic owes to the problem alone, worked out once: it
        # is asked for every subspace the search weighs (tens of thousands per kernel).
        once = {i: b for i, b in enumerate(p.operand_bytes) if i not in onchip}
        if consumer is not None:
            once.pop(len(p.operand_bytes) - 1, None)  # a fused chain may keep the product
        self.once = [(once[i], p.roles[i]) for i in once]
        self.onchip_bytes = sum(b for i, b in enumerate(p.operand_bytes) if i in onchip)
        self.once_bytes = sum(once.values())

    def dominates(self, a: _Vec, b: _Vec) -> bool:
        """Whether `a` is no worse than `b` (within tolerance) on every chosen metric; while
        breaking ties, faster, or as fast for no more energy."""
        if self.ties:
            t = 1 + self.tol[0]
            return a[0] * t < b[0] or (a[0] <= b[0] * t and a[1] <= b[1])
        return all(a[m] <= b[m] * (1 + self.tol[m]) for m in self.metrics)

    def beaten(self, v: _Vec) -> tuple[_Vec, Mapping, bool] | None:
        """A front point that dominates `v` (a mapping, or the lower bound of a subspace)."""
        for q, mp, _, fused in self.front:
            if self.dominates(q, v):
                return q, mp, fused
        return None

    def lower_bound(self, rm: int, rn: int, acc: int, pes: int, grid, k_min: int) -> _Vec:
        spec, p = self.spec, self.p
        pe_b, pe_m, pe_n, pe_k = grid
        # Exact padding of batch, rows and columns; K unpadded; the fewest steps and bytes.
        bp = -(-p.batch // pe_b) * pe_b
        mp_ = -(-p.m // (pe_m * rm)) * pe_m * rm
        np_ = -(-p.n // (pe_n * rn)) * pe_n * rn
        blocks = bp // pe_b * (mp_ // (pe_m * rm)) * (np_ // (pe_n * rn))
        per_cycle = spec.peak_flops(p.precision) / (spec.pe_count * spec.clock_hz)
        steps = blocks * math.ceil(p.k / pe_k / 1024)
        other = max(0.0, p.flops - p.mac_flops)
        compute = (
            2.0 * bp * mp_ * np_ * p.k / pes / per_cycle + steps * spec.mapping_step_cycles
        ) / (spec.clock_hz) + other / (spec.peak_flops(p.precision) * spec.vector_peak_fraction)
        lm_pe = blocks * p.k / pe_k * (rm + rn) * p.itemsize
        if acc == LM:
            lm_pe += steps * 2 * rm * rn * 4
        lm = lm_pe / (spec.lm_bytes_per_cycle_per_pe * spec.clock_hz)
        # Operands as evaluate moves them: each row block of A crosses L1BM once per column
        # tile and each column block of B once per row tile (K unpadded), partial sums of a
        # split K once; from DRAM, A once per column tile and B once per row tile, unless
        # the slab keeps one of them resident (the cheaper of the two, or neither).
        mt, nt = mp_ // (pe_m * rm), np_ // (pe_n * rn)
        sram = float(bp * p.k * p.itemsize * (mp_ * nt + np_ * mt))
        sram += (pe_k - 1) * bp * mp_ * np_ * 4.0
        sram += self.onchip_bytes
        dram = self.once_bytes
        tiles = {"a": nt, "b": mt}
        streamed = [(b, b * tiles.get(role, 1), role) for b, role in self.once]
        dram_min = min(
            sum(b if role == kept else moved for b, moved, role in streamed)
            for kept in ("", "a", "b")
        )
        time_s = spec.kernel_launch_s + max(
            compute, lm, dram / spec.dram_bandwidth, sram / spec.l1bm_bandwidth
        )
        energy = (
            p.flops * spec.energy_pj_per_flop(p.precision)
            + dram_min * spec.energy_pj_per_byte_dram
            + (sram + lm_pe * pes) * spec.energy_pj_per_byte_sram
        ) * 1e-12 + spec.static_power_w * time_s
        acc_b = rm * rn * 4
        cap = capacities(spec)
        lm_use = (2 * (rm + rn) * k_min * p.itemsize + (acc_b if acc == LM else 0)) / cap["LM"]
        grf_use = (acc_b if acc == GRF else 0) / cap["GRF"]
        if self.consumer is not None:
            time_s, energy = time_s + spec.kernel_launch_s, energy  # the consumer runs too
        return _Vec((time_s, energy, max(lm_use, grf_use)))

    def leaf(self, mp: Mapping) -> str | None:
        """Evaluate one mapping; returns what bounds its (unfused) time, None if invalid."""
        self.evaluated += 1
        why = check(self.spec, self.p, mp)
        if why is not None:
            self.rejected.append(Rejected(mp, why, float("inf")))
            return None
        bound = self.consider(mp, False)
        if self.consumer is not None:
            self.consider(mp, True)
        return bound

    def consider(self, mp: Mapping, fused: bool) -> str:
        spec, p = self.spec, self.p
        onchip = tuple(self.onchip) + ((len(p.roles) - 1,) if fused else ())
        ev = evaluate(spec, p, mp, onchip)
        self._consider(mp, fused, ev)
        return ev.modelled.bound

    def _consider(self, mp: Mapping, fused: bool, ev: Evaluation) -> None:
        spec, p = self.spec, self.p
        time_s, energy, usage = ev.modelled.time_s, ev.modelled.energy_j, ev.usage
        if self.consumer is not None:
            c_op, c_ins, c_outs, c_pos = self.consumer
            kdef = lookup(c_op)
            cost = kdef.cost(c_ins, c_outs, {})
            cm = cost_model.model_call(spec, cost, c_ins, c_outs, (c_pos,) if fused else ())
            time_s, energy = time_s + cm.time_s, energy + cm.energy_j
            if fused:
                # The intermediate lives in the LM of the PEs that made it, beside the slabs.
                pes = mp.pes
                per_pe = p.operand_bytes[-1] / pes + ev.footprint["LM"]
                if per_pe > spec.lm_bytes_per_pe:
                    self.rejected.append(Rejected(
                        mp, f"LM: keeping the {int(p.operand_bytes[-1])} B intermediate on chip "
                        f"needs {int(per_pe)} B per PE, it holds {spec.lm_bytes_per_pe}",
                        time_s, fused))  # fmt: skip
                    return
                usage = max(usage, per_pe / spec.lm_bytes_per_pe)
        v = _Vec((time_s, energy, usage))
        hit = self.beaten(v)
        if hit is not None:
            q, qmp, qf = hit
            worse = [
                f"{self.names[m]} {v[m] / q[m]:.2f}x" if q[m] else self.names[m]
                for m in self.metrics
                if v[m] > q[m]
            ]
            why = ", ".join(worse) or "ties on every metric"
            self.rejected.append(
                Rejected(mp, f"dominated by {qmp}{' fused' if qf else ''}: {why}", time_s, fused)
            )
            return
        survivors = []
        for q, qmp, qev, qf in self.front:
            if self.dominates(v, q):
                self.rejected.append(Rejected(qmp, f"dominated by {mp}", q.time_s, qf))
            else:
                survivors.append((q, qmp, qev, qf))
        self.front = [*survivors, (v, mp, ev, fused)]

    def run(self, effort: int) -> None:
        spec, p = self.spec, self.p
        d = default_mapping(spec, p)
        slabs = _slabs(p, effort, d.tile_k)
        k_min = min(k for k, _ in slabs)
        blocks = _blocks(p, effort)
        # The default first, then grids by their bound: a good incumbent prunes the most.
        self.leaf(d)
        grids = _grids(spec, p, effort)
        # Most PEs first (fewest cycles per PE before padding), then a squarer grid.
        grids.sort(key=lambda g: (-math.prod(g), g[3], abs(math.log2(g[1]) - math.log2(g[2]))))
        latency_only = self.metrics == [0]
        per_cycle = spec.peak_flops(p.precision) / (spec.pe_count * spec.clock_hz)
        dram = sum(b for i, b in enumerate(p.operand_bytes) if i not in self.onchip)
        if self.consumer is not None:
            dram -= p.operand_bytes[-1]
        dram_s = dram / spec.dram_bandwidth
        fixed_pj = (
            p.flops * spec.energy_pj_per_flop(p.precision) + dram * spec.energy_pj_per_byte_dram
        )
        for g in grids:
            pes = math.prod(g)
            # No padding, no steps, nothing but the products and the fewest DRAM bytes.
            t = spec.kernel_launch_s + max(p.mac_flops / pes / per_cycle / spec.clock_hz, dram_s)
            if self.beaten(_Vec((t, fixed_pj * 1e-12 + spec.static_power_w * t, 0.0))):
                if latency_only:
                    break  # grids come with ever fewer PEs: none after this one can win
                continue
            for rm, rn, acc in blocks:
                lb = self.lower_bound(rm, rn, acc, pes, g, k_min)
                probe = Mapping(*g, rm, rn, k_min, acc, KEEP_NONE)
                why = check(spec, p, probe)
                if why is not None:  # the smallest slab does not fit: no slab will
                    self.rejected.append(Rejected(probe, why, lb.time_s))
                    continue
                if self.beaten(lb) is not None:
                    continue
                unbound_k = set()  # slabs whose streamed mapping is not DRAM-bound
                for k, keep in slabs:
                    if keep != KEEP_NONE and k in unbound_k:
                        continue  # a resident operand saves only DRAM time: no faster
                    mp = Mapping(*g, rm, rn, k, acc, keep)
                    bound = self.leaf(mp) if mp != d else None
                    if keep == KEEP_NONE and bound not in (None, "dram") and latency_only:
                        unbound_k.add(k)
        if latency_only:
            best = min(self.front, key=lambda f: (f[0][0], f[0][1]))[1]
            self.break_ties((best.pe_b, best.pe_m, best.pe_n, best.pe_k), blocks, slabs, k_min)

    def break_ties(self, grid: tuple, blocks: list, slabs: list, k_min: int) -> None:
        """Of the mappings as fast as the fastest found, on its PE grid, the one of least
        energy, as Front.best orders them (a compile maps for latency alone, and the first
        of several equally fast mappings had cost up to 8% more energy than another on the
        same grid: register blocks and a resident operand change L1BM and DRAM traffic,
        not time). Only its grid: the grid decides the operands' layouts, so another one
        as fast changes the layout switches around the kernel (ResNet-50 at O3 modelled
        0.4% slower with the least energy of every grid). The grid's subspaces are searched
        in the order of their energy bound, each while it can still beat the least energy
        found."""
        self.ties = True
        fastest = min(q[0] for q, _, _, _ in self.front)
        pes = math.prod(grid)
        candidates = []
        for rm, rn, acc in blocks:
            lb = self.lower_bound(rm, rn, acc, pes, grid, k_min)
            if lb[0] > fastest * (1 + self.tol[0]):
                continue  # slower whatever its slab: no tie
            # A tie runs as long as the fastest, drawing static power all that time.
            lb = _Vec((lb[0], lb[1] + self.spec.static_power_w * (fastest - lb[0]), lb[2]))
            if self.beaten(lb) is None:
                candidates.append((lb[1], rm, rn, acc, lb))
        candidates.sort(key=lambda c: c[0])
        for _, rm, rn, acc, lb in candidates:
            if self.beaten(lb) is not None:
                continue
            if check(self.spec, self.p, Mapping(*grid, rm, rn, k_min, acc, KEEP_NONE)):
                continue  # the smallest slab does not fit: no slab will
            for k, keep in slabs:
                mp = Mapping(*grid, rm, rn, k, acc, keep)
                if all(mp != q for _, q, _, _ in self.front):
                    self.leaf(mp)


def _specs_of(kernel: Kernel, operands: MappingABC[str, TensorSpec]) -> tuple[list, list]:
    try:
        ins = [operands[s] for s in kernel.inputs]
        outs = [operands[s] for s in kernel.outputs]
    except KeyError as e:
        raise MapperError(
            f"map_kernel: no shape for slot {e.args[0]!r}; give operands={{slot: TensorSpec}} "
            f"for every input and output of '{kernel.op}'"
        ) from None
    return ins, outs


def map_kernel(
    kernel: Kernel | Sequence[Kernel],
    spec: DeviceSpec = MNCORE2,
    metrics: Metrics = Metrics.LATENCY | Metrics.ENERGY | Metrics.RESOURCE_USAGE,
    *,
    operands: MappingABC[str, TensorSpec],
    objective_tolerance: float = 0.0,
    resource_usage_tolerance: float = 0.0,
    effort: int = 3,
) -> Front:
    """The Pareto front of mappings of a gemm/conv2d kernel, or of a chain [matrix kernel,
    consumer of its output] whose intermediate may stay on chip. `operands` gives every
    slot's TensorSpec. `effort` (0..4) picks the space searched (the presets' search effort)."""
    chain = [kernel] if isinstance(kernel, Kernel) else list(kernel)
    if not chain or len(chain) > 2 or not all(isinstance(k, Kernel) for k in chain):
        raise MapperError("map_kernel takes a Kernel or a [producer, consumer] list of Kernels")
    first = chain[0]
    if first.op not in PROBLEMS:
        raise MapperError(
            f"map_kernel: '{first.op}' has no mapping; kernels with one: {', '.join(PROBLEMS)}"
        )
    if not 0 <= effort <= MAX_EFFORT:
        raise MapperError(f"map_kernel: effort {effort} is not in 0..{MAX_EFFORT}")
    if objective_tolerance < 0 or resource_usage_tolerance < 0:
        raise MapperError("map_kernel: tolerances are relative margins, 0 or more")
    if not metrics:
        raise MapperError(
            "map_kernel: give at least one of Metrics.LATENCY, ENERGY, RESOURCE_USAGE"
        )
    ins, outs = _specs_of(first, operands)
    flops = first.kdef.cost(ins, outs, first.attrs).flops
    p = problem_of(first.op, ins, outs, first.attrs, flops)
    consumer = None
    if len(chain) == 2:
        second = chain[1]
        if first.outputs[0] not in second.inputs:
            raise MapperError(
                f"map_kernel: '{second.op}' does not read '{first.outputs[0]}', the output "
                f"of '{first.op}'; a chain is a producer and a consumer of its output"
            )
        c_ins, c_outs = _specs_of(second, operands)
        consumer = (second.op, c_ins, c_outs, list(second.inputs).index(first.outputs[0]))
    search = _Search(spec, p, metrics, objective_tolerance, resource_usage_tolerance,
                     tuple(first.attrs.get("onchip", ())), consumer)  # fmt: skip
    search.run(effort)
    points = [
        MappedPoint(mp, v[0], v[1], v[2], ev.modelled.bound, fused, tuple(chain))
        for v, mp, ev, fused in search.front
    ]
    points.sort(key=lambda q: (q.time_s, q.energy_j, q.usage))
    return Front(points, metrics, search.evaluated, space_size(spec, p, effort), search.rejected)


def brute_force(
    kernel: Kernel,
    spec: DeviceSpec = MNCORE2,
    *,
    operands: MappingABC[str, TensorSpec],
    effort: int = 3,
) -> tuple[float, int]:
    """(lowest modelled time, mappings evaluated) over the whole space: the mapper's check."""
    ins, outs = _specs_of(kernel, operands)
    flops = kernel.kdef.cost(ins, outs, kernel.attrs).flops
    p = problem_of(kernel.op, ins, outs, kernel.attrs, flops)
    onchip = tuple(kernel.attrs.get("onchip", ()))
    best, count = math.inf, 0
    for mp in space(spec, p, effort):
        count += 1
        if check(spec, p, mp) is None:
            best = min(best, evaluate(spec, p, mp, onchip).modelled.time_s)
    return best, count
