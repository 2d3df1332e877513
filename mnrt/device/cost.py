"""The timing and energy model: deterministic modelled device time, never a sleep.

For one kernel execution with work `Cost` (FLOPs, DRAM bytes, SRAM bytes, parallelism):

    compute_s = flops / (peak(precision) * unit_share * utilisation)
        peak from DeviceSpec.peak_tflops; unit_share is 1 on the matrix unit (GEMM, conv)
        and DeviceSpec.vector_peak_fraction on the vector ALUs (everything else);
        utilisation = units / (ceil(units / pe_count) * pe_count): the last wave of work
        leaves PEs idle when `parallel` units do not divide the array.
    dram_s    = dram_bytes / dram_bandwidth           (all groups' DRAM together)
    sram_s    = sram_bytes / l1bm_bandwidth           (on-chip reuse traffic)
    time_s    = kernel_launch_s + max(compute_s, dram_s, sram_s)   (perfect overlap)
    energy_j  = 1e-12 * (flops * pJ/flop(precision) + dram_bytes * pJ/B(DRAM)
                         + sram_bytes * pJ/B(SRAM)) + static_power_w * time_s

Host transfers (write/read buffer) move bytes over the host link and through DRAM:
    time_s = nbytes / host_link_bandwidth, energy from the DRAM bytes and static power.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .kernels.registry import Cost
from .spec import DeviceSpec


@dataclass(frozen=True)
class Modelled:
    """Modelled device time and energy of one command, with the terms that made it."""

    time_s: float
    energy_j: float
    flops: float = 0.0
    dram_bytes: float = 0.0
    bound: str = "launch"  # which term dominated: compute | dram | sram | link | launch

    def to_dict(self) -> dict:
        return asdict(self)


def utilisation(spec: DeviceSpec, parallel: int) -> float:
    if parallel <= 0:
        return 1.0
    pes = spec.pe_count
    return parallel / (math.ceil(parallel / pes) * pes)


def model_kernel(spec: DeviceSpec, cost: Cost, precision: str) -> Modelled:
    share = 1.0 if cost.matrix else spec.vector_peak_fraction
    peak = spec.peak_flops(precision) * share * utilisation(spec, cost.parallel)
    terms = {
        "compute": cost.flops / peak,
        "dram": cost.dram_bytes / spec.dram_bandwidth,
        "sram": cost.sram_bytes / spec.l1bm_bandwidth,
    }
    bound = max(terms, key=terms.__getitem__)
    if terms[bound] == 0.0:
        bound = "launch"
    time_s = spec.kernel_launch_s + terms.get(bound, 0.0)
    energy_pj = (
        cost.flops * spec.energy_pj_per_flop(precision)
        + cost.dram_bytes * spec.energy_pj_per_byte_dram
        + cost.sram_bytes * spec.energy_pj_per_byte_sram
    )
    return Modelled(
        time_s=time_s,
        energy_j=energy_pj * 1e-12 + spec.static_power_w * time_s,
        flops=cost.flops,
        dram_bytes=cost.dram_bytes,
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
