"""The mapping-aware timing and energy model of matrix kernels (GEMM, conv).

A *mapping* says how a matrix product's loops are laid over the chip and its memories:

    pe_b, pe_m, pe_n,  spatial split over the 4096 PEs (batch, output rows, output columns,
    pe_k               reduction); the PE grid folds onto the hierarchy L2B x L1B x MAB x PE
                       (`hierarchy`); pe_k > 1 sums partial products through L1BM
    reg_m, reg_n       each PE's output block held by the MAU's accumulators, in 4x4 MAU
                       blocks; `accum` says where they live: GRF (1) or LM (2)
    tile_k             K elements of the a and b slabs a PE keeps in its local memory (LM)
                       per step, double-buffered; slabs arrive by broadcast through L1BM
    keep               which operand stays resident in L2BM across the outer loop:
                       0 none (both stream from DRAM), 1 a, 2 b

It is stored with the program as the kernel attribute `mapping` (`Mapping.to_attr`: nine
ints in the order above), so a replay prices exactly what the compile chose.

For a product of `batch` independent [M, K] x [K, N] products, with Mp, Np, Kp, Bp the dims
padded to whole tiles (M to pe_m * reg_m, K to pe_k * tile_k, batch to pe_b), P the PEs used
(pe_b pe_m pe_n pe_k), mt = Mp / (pe_m reg_m) and nt = Np / (pe_n reg_n) output blocks per PE
and e the operand item size:

    steps     = Bp/pe_b * mt * nt * Kp/(pe_k tile_k)                (per PE)
    compute_s = (2 Bp Mp Np Kp / P / flops_per_cycle_per_pe
                 + steps * DeviceSpec.mapping_step_cycles) / clock
                + other flops (epilogue, bias) at the vector rate
    lm_s      = per-PE LM traffic / (lm_bytes_per_cycle_per_pe * clock), the traffic being
                Kp/pe_k (reg_m + reg_n) e per output block, plus reading and writing the
                accumulators once per step when they live in LM
    sram_s    = (Bp Kp e (Mp nt + Np mt)                     (slabs broadcast from L1BM)
                 + (pe_k - 1) Bp Mp Np 4) / l1bm_bandwidth    (partial sums reduced)
    dram_s    = DRAM bytes / dram_bandwidth: a streams nt times and b mt times unless kept
                resident in L2BM (then once); the output and any bias once; operands the
                program keeps on chip (`onchip`) move over L1BM instead
    time_s    = kernel_launch_s + max(compute_s, lm_s, sram_s, dram_s)       (overlap)
    energy_j  = flops pJ/flop + DRAM bytes pJ/B(DRAM) + (L1BM + LM bytes) pJ/B(SRAM)
                + static power * time_s

A mapping is *valid* when its PEs exist, the accumulators fit the GRF (or LM), the slabs
(and LM accumulators) fit LM, and a resident operand's panel fits the chip's L2BM; `check`
names the resource that rules one out. `usage` is the largest share of LM, GRF or L2BM the
mapping occupies: the resource metric of the mapper (mnrt.compiler.mapper).

At half precision a 32x32 GRF block reads 128 B of LM per k and does 1024 multiply-adds:
16 cycles of each, so large products reach the MAU peak; small, ragged or thin products
lose to padding, idle PEs and per-step overhead, as they do on the device.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, replace
from typing import NamedTuple

from .cost import Modelled, model_call, precision_of
from .kernels import chain
from .kernels.registry import KernelDef, TensorSpec
from .spec import DeviceSpec

GRF, LM = 1, 2
KEEP_NONE, KEEP_A, KEEP_B = 0, 1, 2
ACCUM_NAMES = {GRF: "GRF", LM: "LM"}
KEEP_NAMES = {KEEP_NONE: "none", KEEP_A: "a", KEEP_B: "b"}
FIELDS = ("pe_b", "pe_m", "pe_n", "pe_k", "reg_m", "reg_n", "tile_k", "accum", "keep")
MAU_BLOCK = 4


@dataclass(frozen=True)
class Mapping:
    """One mapping of a matrix product (fields documented in the module docstring)."""

    pe_b: int
    pe_m: int
    pe_n: int
    pe_k: int
    reg_m: int
    reg_n: int
    tile_k: int
    accum: int = GRF
    keep: int = KEEP_NONE

    def to_attr(self) -> tuple[int, ...]:
        return tuple(getattr(self, f) for f in FIELDS)

    @classmethod
    def from_attr(cls, values: Sequence[int]) -> Mapping:
        """A mapping from the kernel attribute, its shape checked (not its fit: `check`)."""
        values = tuple(values)
        if len(values) != len(FIELDS):
            raise ValueError(f"a mapping is {len(FIELDS)} ints ({', '.join(FIELDS)}), got {values}")
        m = cls(*(int(v) for v in values))
        bad = [f for f in FIELDS[:7] if not 1 <= getattr(m, f) <= 1 << 20]
        if bad:
            raise ValueError(f"mapping fields {', '.join(bad)} must be between 1 and 2**20")
        if m.accum not in ACCUM_NAMES or m.keep not in KEEP_NAMES:
            raise ValueError(
                "mapping accum must be 1 (GRF) or 2 (LM), keep 0 (none), 1 (a) or 2 (b)"
            )
        if m.reg_m % MAU_BLOCK or m.reg_n % MAU_BLOCK:
            raise ValueError(
                f"mapping reg_m and reg_n must be multiples of the {MAU_BLOCK}x{MAU_BLOCK} "
                "MAU block"
            )
        return m

    def __str__(self) -> str:
        return (
            f"pe {self.pe_b}x{self.pe_m}x{self.pe_n}x{self.pe_k} reg {self.reg_m}x{self.reg_n}"
            f"@{ACCUM_NAMES[self.accum]} k{self.tile_k} keep={KEEP_NAMES[self.keep]}"
        )

    @property
    def pes(self) -> int:
        return self.pe_b * self.pe_m * self.pe_n * self.pe_k

    def hierarchy(self, spec: DeviceSpec) -> dict[str, int]:
        """How many instances of each unit the PE grid spans, filled innermost first (a
        small grid stays within one MAB, then one L1B, ...)."""
        left = self.pes
        units = (
            ("PE", spec.pe_per_mab),
            ("MAB", spec.mab_per_l1b),
            ("L1B", spec.l1b_per_l2b),
            ("L2B", spec.l2b_count),
        )
        used = {}
        for unit, count in units:
            used[unit] = max(1, min(count, left))
            left = max(1, left // used[unit])
        return {u: used[u] for u in ("L2B", "L1B", "MAB", "PE")}


@dataclass(frozen=True)
class Problem:
    """A matrix kernel as the mapping model sees it: `batch` products of [m, k] x [k, n].

    `a_bytes`/`b_bytes` are one product's a and b as they cross DRAM (a conv's b is its input
    image, not the unfolded columns), `once_bytes` what moves exactly once (output, bias);
    `roles` says per operand position (inputs, then outputs) whether it is "a", "b" or
    "once", so operands kept on chip come off the right term."""

    batch: int
    m: int
    n: int
    k: int
    itemsize: int
    precision: str
    flops: float
    a_bytes: float
    b_bytes: float
    operand_bytes: tuple[float, ...]
    roles: tuple[str, ...]

    @property
    def mac_flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


class Evaluation(NamedTuple):
    """What a mapping costs (`modelled`) and occupies (`usage`, `footprint` per memory). A
    tuple, not a frozen dataclass: the mapper makes one per mapping it weighs, and a frozen
    dataclass's initialiser cost a fifth of `evaluate`."""

    modelled: Modelled
    usage: float
    footprint: MappingABC[str, float]
    terms: MappingABC[str, float]


def _ceil_to(x: int, q: int) -> int:
    return -(-x // q) * q


def footprint(spec: DeviceSpec, p: Problem, mp: Mapping) -> dict[str, float]:
    """Bytes the mapping holds in each memory: per PE for LM and GRF, chip-wide for L2BM."""
    reg_m, reg_n, keep = mp.reg_m, mp.reg_n, mp.keep
    acc = reg_m * reg_n * 4  # the MAU accumulates in float32
    lm = 2 * (reg_m + reg_n) * mp.tile_k * p.itemsize
    if mp.accum == LM:
        lm += acc
    l2bm = 0.0
    if keep == KEEP_A:
        l2bm = mp.pe_b * mp.pe_m * reg_m * p.k * p.itemsize
    elif keep == KEEP_B:
        l2bm = mp.pe_b * mp.pe_n * reg_n * p.k * p.itemsize
    return {"LM": float(lm), "GRF": float(acc if mp.accum == GRF else 0), "L2BM": float(l2bm)}


@functools.lru_cache(maxsize=8)
def capacities(spec: DeviceSpec) -> dict[str, float]:
    return {
        "LM": float(spec.lm_bytes_per_pe),
        "GRF": float(spec.grf_bytes_per_pe),
        "L2BM": float(spec.l2b_count * spec.l2bm_bytes_per_l2b),
    }


_HELD = {"GRF": "accumulators", "LM": "slabs and accumulators", "L2BM": "resident panel"}


def check(spec: DeviceSpec, p: Problem, mp: Mapping) -> str | None:
    """Why the device cannot run `mp` (the resource that rules it out), or None."""
    pes = mp.pes
    if pes > spec.pe_count:
        return f"PE array: the grid takes {pes} PEs, the chip has {spec.pe_count}"
    if mp.reg_m % MAU_BLOCK or mp.reg_n % MAU_BLOCK:
        return f"MAU: output blocks must be multiples of {MAU_BLOCK}x{MAU_BLOCK}"
    used, cap = footprint(spec, p, mp), capacities(spec)
    for mem in ("GRF", "LM", "L2BM"):
        if used[mem] > cap[mem]:
            per = "" if mem == "L2BM" else " per PE"
            return f"{mem}: {_HELD[mem]} need {int(used[mem])} B{per}, it holds {int(cap[mem])}"
    return None


def evaluate(spec: DeviceSpec, p: Problem, mp: Mapping, onchip: Sequence[int] = ()) -> Evaluation:
    """The modelled cost of running `p` with a valid mapping `mp` (see `check`). The mapper
    and its brute-force check call this for every mapping they weigh (a million for a large
    product), so each operand is read once into a local."""
    pe_b, pe_m, pe_n, pe_k = mp.pe_b, mp.pe_m, mp.pe_n, mp.pe_k
    reg_m, reg_n, tile_k, accum, keep = mp.reg_m, mp.reg_n, mp.tile_k, mp.accum, mp.keep
    itemsize, flops, clock_hz = p.itemsize, p.flops, spec.clock_hz
    bp = _ceil_to(p.batch, pe_b)
    rows, cols, depth = pe_m * reg_m, pe_n * reg_n, pe_k * tile_k
    mp_, np_, kp = _ceil_to(p.m, rows), _ceil_to(p.n, cols), _ceil_to(p.k, depth)
    mt, nt = mp_ // rows, np_ // cols
    pes = mp.pes
    blocks = bp // pe_b * mt * nt  # output blocks per PE
    steps = blocks * (kp // depth)
    peak = spec.peak_flops(p.precision)
    per_cycle = peak / (spec.pe_count * clock_hz)
    macs = 2.0 * bp * mp_ * np_ * kp / pes
    other = max(0.0, flops - p.mac_flops)
    compute_s = (macs / per_cycle + steps * spec.mapping_step_cycles) / clock_hz + other / (
        peak * spec.vector_peak_fraction
    )
    lm_pe = blocks * kp // pe_k * (reg_m + reg_n) * itemsize
    if accum == LM:
        lm_pe += steps * 2 * reg_m * reg_n * 4
    lm_s = lm_pe / (spec.lm_bytes_per_cycle_per_pe * clock_hz)
    sram = float(bp * kp * itemsize * (mp_ * nt + np_ * mt))
    sram += (pe_k - 1) * bp * mp_ * np_ * 4.0  # float32 partial sums, reduced
    reads = {"a": nt if keep != KEEP_A else 1, "b": mt if keep != KEEP_B else 1, "once": 1}
    dram = 0.0
    for pos, (role, nbytes) in enumerate(zip(p.roles, p.operand_bytes)):
        moved = nbytes * reads[role]
        if pos in onchip:
            sram += moved
        else:
            dram += moved
    terms = {
        "compute": compute_s,
        "lm": lm_s,
        "sram": sram / spec.l1bm_bandwidth,
        "dram": dram / spec.dram_bandwidth,
    }
    bound, slowest = "compute", compute_s  # the first of the largest terms, as max() says
    for name in ("lm", "sram", "dram"):
        if terms[name] > slowest:
            bound, slowest = name, terms[name]
    time_s = spec.kernel_launch_s + slowest
    lm_total = lm_pe * pes
    energy_pj = (
        flops * spec.energy_pj_per_flop(p.precision)
        + dram * spec.energy_pj_per_byte_dram
        + (sram + lm_total) * spec.energy_pj_per_byte_sram
    )
    used, cap = footprint(spec, p, mp), capacities(spec)
    return Evaluation(
        modelled=Modelled(
            time_s=time_s,
            energy_j=energy_pj * 1e-12 + spec.static_power_w * time_s,
            flops=flops,
            dram_bytes=dram,
            bound=bound,
        ),
        usage=max(used["LM"] / cap["LM"], used["GRF"] / cap["GRF"], used["L2BM"] / cap["L2BM"]),
        footprint=used,
        terms=terms,
    )


# ---- which kernels have a mapping, and the product each one is -------------------------
ProblemFn = Callable[
    [Sequence[TensorSpec | None], Sequence[TensorSpec], MappingABC, float], Problem
]


def _gemm(ins, outs, attrs, flops) -> Problem:
    a, b = ins[0], ins[1]
    out = outs[0]
    k = a.shape[-2] if attrs.get("trans_a") else a.shape[-1]
    m, n = out.shape[-2], out.shape[-1]
    batch = math.prod(out.shape[:-2])
    e = a.dtype.itemsize
    operands = [t for t in ins if t is not None] + list(outs)
    roles = ("a", "b", *("once",) * (len(operands) - 2))
    # a and b stream per product: a shared (2-D) operand is re-read for every product too.
    per = (batch * m * k * e, batch * k * n * b.dtype.itemsize)
    nbytes = per + tuple(float(t.nbytes) for t in operands[2:])
    return Problem(batch, m, n, k, e, precision_of(operands), flops, *per, nbytes, roles)


def _per_image(ins, outs, attrs, flops, m: int, n: int, k: int) -> Problem:
    """A convolution as `batch` GEMMs, one per image and group, of [m, k] weights by [k, n]
    columns made on chip from the image: the image (x) is what crosses DRAM as b, the
    weights (w) as a, once per image unless resident, the rest once."""
    x, w = ins[0], ins[1]
    operands = [t for t in ins if t is not None] + list(outs)
    images = x.shape[0]
    a_bytes, b_bytes = float(images * w.nbytes), float(x.nbytes)
    roles = ("b", "a", *("once",) * (len(operands) - 2))
    nbytes = (b_bytes, a_bytes, *(float(t.nbytes) for t in operands[2:]))
    return Problem(
        images * attrs.get("groups", 1), m, n, k, x.dtype.itemsize, precision_of(operands),
        flops, a_bytes, b_bytes, nbytes, roles,
    )  # fmt: skip


def _conv2d(ins, outs, attrs, flops) -> Problem:
    """[O/g, C/g * kH * kW] weights by the unfolded columns of each output pixel."""
    _, o, oh, ow = outs[0].shape
    w = ins[1]
    return _per_image(ins, outs, attrs, flops, o // attrs.get("groups", 1), oh * ow,
                      w.shape[1] * w.shape[2] * w.shape[3])  # fmt: skip


def _conv_transpose2d(ins, outs, attrs, flops) -> Problem:
    """As the kernel computes it: [O/g * kH * kW, C/g] weights by the input's pixels, every
    product of a pixel and a tap then added into its place in the output as it leaves the
    accumulators."""
    _, c, h, wd = ins[0].shape
    _, og, kh, kw = ins[1].shape
    return _per_image(ins, outs, attrs, flops, og * kh * kw, h * wd, c // attrs.get("groups", 1))


PROBLEMS: dict[str, ProblemFn] = {
    "gemm": _gemm,
    "conv2d": _conv2d,
    "conv_transpose2d": _conv_transpose2d,
}


def _headed(ins, outs, attrs, flops) -> Problem:
    """A chain holding a matrix kernel (device/kernels/chain.py): its product, with `flops`
    (the chain's) beyond the multiply-adds at the vector rate (the prologue's counted once,
    though x streams more often), the chain's x streamed in the kernel's input's place (in
    x's own dtype), its other operands and its outputs each moving once: the kernel's own
    result stays on chip, each output block finished as it leaves the accumulators."""
    at = chain.matrix_step(attrs)
    if at is None:
        raise ValueError(
            f"it holds no matrix kernel ({', '.join(PROBLEMS)}); only a chain that does takes "
            "a mapping"
        )
    step = chain.plan(attrs, ins)[at]
    p = PROBLEMS[step.op](step.ins, [step.y], step.attrs, flops)
    first = step.takes[0]  # the kernel's operands are the chain's first .. first + k - 1
    streamed = p.operand_bytes[0] * ins[0].dtype.itemsize / step.ins[0].dtype.itemsize
    once = [float(t.nbytes) for t in ins]
    nbytes = [streamed, *once[1:first], *p.operand_bytes[1:-1], *once[first + len(step.takes) :]]
    roles = [p.roles[0], *("once",) * (first - 1), *p.roles[1:-1]]
    roles += ["once"] * (len(nbytes) - len(roles))
    return replace(
        p,
        operand_bytes=(*nbytes, *(float(t.nbytes) for t in outs)),
        roles=(*roles, *("once",) * len(outs)),
    )


# Kernels that take a `mapping` attribute: those the mapper maps, and chains headed by one.
MAPPED: dict[str, ProblemFn] = {**PROBLEMS, chain.NAME: _headed}


def problem_of(
    op: str,
    ins: Sequence[TensorSpec | None],
    outs: Sequence[TensorSpec],
    attrs: MappingABC,
    flops: float,
) -> Problem:
    """The product kernel `op` computes on these operands (`flops`: its Cost's)."""
    return MAPPED[op](ins, outs, attrs, flops)


def model_kernel_call(
    spec: DeviceSpec,
    kdef: KernelDef,
    ins: Sequence[TensorSpec | None],
    outs: Sequence[TensorSpec],
    attrs: MappingABC,
) -> Modelled:
    """What the device charges for one call of a kernel: by its mapping when it carries one,
    else by its cost with the operands at `onchip` kept in local memory. The one price both
    the emulator and the compiler's estimates (pipeline stages) use. Raises ValueError
    naming what rules a mapping out."""
    cost = kdef.cost(ins, outs, attrs)
    if attrs.get("mapping"):
        return model_mapped(spec, kdef.name, ins, outs, attrs, cost.flops)
    return model_call(spec, cost, ins, outs, attrs.get("onchip", ()))


def model_mapped(
    spec: DeviceSpec,
    op: str,
    ins: Sequence[TensorSpec | None],
    outs: Sequence[TensorSpec],
    attrs: MappingABC,
    flops: float,
) -> Modelled:
    """A mapped kernel's modelled cost; raises ValueError naming what rules the mapping out."""
    p = problem_of(op, ins, outs, attrs, flops)
    mp = Mapping.from_attr(attrs["mapping"])
    why = check(spec, p, mp)
    if why is not None:
        raise ValueError(f"mapping {mp} cannot run this {op}: {why}")
    return evaluate(spec, p, mp, attrs.get("onchip", ())).modelled
