"""The timing and energy model: deterministic modelled device time, never a sleep.

For one kernel execution with work `Cost` (FLOPs, DRAM bytes, SRAM bytes, parallelism):

    compute_s = flops / (peak(precision) * unit_share * utilisation)
        peak from DeviceSpec.peak_tflops, precision that of the kernel's first operand that
        is not bool (a `where` computes in its data's precision, not its condition's; half
        in, float out is priced at the half peak); unit_share is 1 on the matrix unit (GEMM,
        conv) and DeviceSpec.vector_peak_fraction on the vector ALUs (everything else);
        utilisation = fill * units / (ceil(units / pe_count) * pe_count): the last wave of
        work leaves PEs idle when `parallel` units do not divide the array, and a unit the
        work fills only partly (`fill` < 1: a ragged 4x4 GEMM block) idles the rest of its
        PE, so a bigger problem never computes faster.
    dram_s    = dram_bytes / dram_bandwidth           (all groups' DRAM together)
    sram_s    = sram_bytes / l1bm_bandwidth           (on-chip reuse traffic)
    l2bm_s    = l2bm_bytes / l2bm_bandwidth           (traffic between L1Bs)
    lm_s      = lm_bytes / lm_bandwidth               (operands kept in PE local memory,
                                                       and Cost.lm_bytes)
    time_s    = kernel_launch_s + max(compute_s, dram_s, sram_s, l2bm_s, lm_s) (overlap)
    energy_j  = 1e-12 * (flops * pJ/flop(precision) + dram_bytes * pJ/B(DRAM)
                         + (sram_bytes + l2bm_bytes + lm_bytes) * pJ/B(SRAM))
                + static_power_w * time_s

A layout switch (the `relayout` kernel: one on-chip tensor from one MN-Core layout to
another) moves the tensor's bytes once over the outermost level where the two layouts put
some element on another unit (device/layout.py `switch_level`): within a PE through its
local memory, between PEs of an L1B through L1BM, between L1Bs through L2BM. Its Cost
carries them as lm_bytes, sram_bytes or l2bm_bytes, so by the formula above

    relayout time_s = kernel_launch_s + nbytes / bandwidth(level)

with bandwidth(LM) > bandwidth(L1BM) > bandwidth(L2BM) (DeviceSpec), and no DRAM bytes.

Operands a program keeps in PE local memory (a kernel's `onchip` attribute, by position:
inputs, then outputs) take their own traffic (`Cost.traffic`, else their size) off
dram_bytes and move it as lm_bytes instead. Local memory is faster than DRAM and cheaper per
byte, so keeping an operand on chip never costs more time or energy than leaving it in DRAM.

A chain (one launch running several kernels, each on the one before's result and on
operands of the chain's own, `Cost.steps`) is priced as one kernel whose terms are its
steps' together:

    compute_s = sum over steps of flops / (peak(step precision) * unit_share * utilisation)
    dram      = the first step's input traffic + the last step's output traffic
                + the result of the step it also writes out (its tap), if any
                + each step's traffic beyond the results it reads and writes (the
                  chain's operands it takes, a re-read window)
                + both sides of every intermediate not kept in local memory
    lm        = both sides of every intermediate kept in PE local memory
    sram      = the steps' sram_bytes together
    time_s    = kernel_launch_s + max(compute_s, dram_s, sram_s, lm_s), energy as above with
                each step's flops at its own precision's pJ/flop

An intermediate between two pointwise steps (each output element from the same element of
each input: unary and binary arithmetic, casts, where) is streamed, element by element,
as loop fusion computes it: it moves through local memory in tiles and never needs room
for the whole of it. Other intermediates are kept in local memory in order while each
fits beside the one the step making it reads (the previous intermediate, when that was
kept) in the local memory left to the chain (its `lm_room` attribute: what a compiled
program does not keep there within its sram_budget; else the chip's whole, pe_count *
lm_bytes_per_pe); one that does not fit makes a DRAM round trip. The chain's own operands
(its input, the others, its output) follow `onchip` as any kernel's do. A one-step chain
is priced exactly as its step; a longer one saves a launch per step it absorbs, and every
intermediate's DRAM traffic that fits on chip.

Host transfers (write/read buffer) move bytes over the host link and through DRAM:
    time_s = nbytes / host_link_bandwidth, energy from the DRAM bytes and static power.

Copies between buffers (`DeviceSpec.copy_cost`) are priced in spec.py beside the link they
cross: `LinkSpec.copy_cost` between boards, `DeviceSpec.local_copy_cost` within one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from .dtypes import BOOL
from .kernels.registry import Cost, Part, TensorSpec
from .modelled import Modelled
from .spec import DeviceSpec


def utilisation(spec: DeviceSpec, parallel: int, fill: float = 1.0) -> float:
    if parallel <= 0:
        return 1.0
    pes = spec.pe_count
    return fill * parallel / (math.ceil(parallel / pes) * pes)


def precision_of(operands: Sequence[TensorSpec]) -> str:
    """The precision a kernel computes in: that of its first operand (inputs, then outputs)
    that is not bool, else of its first."""
    return next((t for t in operands if t.dtype is not BOOL), operands[0]).dtype.precision


def model_call(
    spec: DeviceSpec,
    cost: Cost,
    ins: Sequence[TensorSpec | None],
    outs: Sequence[TensorSpec],
    onchip: Sequence[int] = (),
) -> Modelled:
    """One kernel call: its `cost` at its operands' precision, the operands at positions
    `onchip` (inputs, then outputs) kept in PE local memory rather than DRAM."""
    if cost.steps:
        return model_chain(spec, cost.steps, onchip, cost.lm_room, len(ins))
    operands = [t for t in ins if t is not None] + list(outs)
    lm_bytes = 0.0
    if onchip:
        traffic = cost.traffic
        lm_bytes = float(sum(operands[p].nbytes if traffic is None else traffic[p] for p in onchip))
        cost = dataclasses.replace(cost, dram_bytes=max(0.0, cost.dram_bytes - lm_bytes))
    return model_kernel(spec, cost, precision_of(operands), lm_bytes)


def model_kernel(spec: DeviceSpec, cost: Cost, precision: str, lm_bytes: float = 0.0) -> Modelled:
    return _modelled(
        spec,
        _compute_s(spec, cost, precision),
        cost.flops * spec.energy_pj_per_flop(precision),
        cost,
        cost.dram_bytes,
        lm_bytes,
    )


def model_chain(
    spec: DeviceSpec,
    steps: Sequence[Part],
    onchip: Sequence[int] = (),
    room: float | None = None,
    inputs: int = 1,
) -> Modelled:
    """A chain's steps run in one launch: the formula in the module docstring. `onchip` as
    for a kernel, by position among the chain's operands (its input x, its other inputs in
    order, then its output and its tapped result; `inputs` of them before those); `room`
    the local memory its intermediates may take (None: the chip's whole)."""

    def moved(cost: Cost, t: TensorSpec, position: int) -> float:
        return float(t.nbytes if cost.traffic is None else cost.traffic[position])

    capacity = spec.pe_count * spec.lm_bytes_per_pe
    capacity = capacity if room is None else min(capacity, room)
    first, last = steps[0], steps[-1]
    ends = (moved(first.cost, first.x, first.at), moved(last.cost, last.y, len(last.ins)))
    kept = ends[0] * (0 in onchip) + ends[1] * (inputs in onchip)
    dram = ends[0] + ends[1]
    lm = sram = l2bm = step_lm = compute_s = flop_pj = flops = 0.0
    held = 0  # bytes of the intermediate the next step reads, when it is in local memory
    for k, part in enumerate(steps):
        cost, y, outputs_at = part.cost, part.y, len(part.ins)
        dram += cost.dram_bytes - moved(cost, part.x, part.at) - moved(cost, y, outputs_at)
        others = [j for j in range(len(part.ins)) if j != part.at]
        kept += sum(moved(cost, part.ins[j], j) for j, t in zip(others, part.takes) if t in onchip)
        if part.written:  # the tap: to DRAM (or the chain's local memory) besides
            tapped = moved(cost, y, outputs_at)
            dram += tapped
            kept += tapped * (inputs + 1 in onchip)
        sram += cost.sram_bytes
        l2bm += cost.l2bm_bytes
        step_lm += cost.lm_bytes
        precision = precision_of([*part.ins, y])
        compute_s += _compute_s(spec, cost, precision)
        flop_pj += cost.flops * spec.energy_pj_per_flop(precision)
        flops += cost.flops
        if k + 1 < len(steps):
            after = steps[k + 1]
            both = moved(cost, y, outputs_at) + moved(after.cost, y, after.at)
            if part.pointwise and after.pointwise:
                lm, held = lm + both, 0  # streamed: never whole in local memory
            elif held + y.nbytes <= capacity:
                lm, held = lm + both, y.nbytes
            else:
                dram, held = dram + both, 0
    total = Cost(
        flops=flops,
        dram_bytes=max(0.0, dram - kept),
        sram_bytes=sram,
        l2bm_bytes=l2bm,
        lm_bytes=step_lm,
    )
    return _modelled(spec, compute_s, flop_pj, total, total.dram_bytes, lm + kept)


def _compute_s(spec: DeviceSpec, cost: Cost, precision: str) -> float:
    share = 1.0 if cost.matrix else spec.vector_peak_fraction
    peak = spec.peak_flops(precision) * share * utilisation(spec, cost.parallel, cost.fill)
    return cost.flops / peak


def _modelled(
    spec: DeviceSpec, compute_s: float, flop_pj: float, cost: Cost, dram: float, lm: float
) -> Modelled:
    """The terms to time and energy: the slowest term after the launch (perfect overlap)."""
    terms = {
        "compute": compute_s,
        "dram": dram / spec.dram_bandwidth,
        "sram": cost.sram_bytes / spec.l1bm_bandwidth,
        "l2bm": cost.l2bm_bytes / spec.l2bm_bandwidth,
        "lm": (lm + cost.lm_bytes) / spec.lm_bandwidth,
    }
    bound = max(terms, key=terms.__getitem__)
    if terms[bound] == 0.0:
        bound = "launch"
    time_s = spec.kernel_launch_s + terms.get(bound, 0.0)
    energy_pj = (
        flop_pj
        + dram * spec.energy_pj_per_byte_dram
        + (cost.sram_bytes + cost.l2bm_bytes + lm + cost.lm_bytes) * spec.energy_pj_per_byte_sram
    )
    return Modelled(
        time_s=time_s,
        energy_j=energy_pj * 1e-12 + spec.static_power_w * time_s,
        flops=cost.flops,
        dram_bytes=dram,
        bound=bound,
    )


def model_transfer(spec: DeviceSpec, nbytes: int) -> Modelled:
    time_s = nbytes / spec.host_link_bandwidth
    energy_pj = nbytes * spec.energy_pj_per_byte_dram
    return Modelled(
        time_s=time_s,
        energy_j=energy_pj * 1e-12 + spec.static_power_w * time_s,
        dram_bytes=float(nbytes),
        bound="link",
    )
