"""`DeviceSpec`: every number mnrt knows about MN-Core 2, in one frozen place.

Sources, cited per field below:
  [MLSDK]  MN-Core MLSDK documentation, "7. Hardware Specification"
           (dev.mn-core.com/sdk/0.5/MLSDK/docs/en/hardware_specification.html): hierarchy,
           memory sizes.
  [PFN]    Preferred Networks, MN-Core project page and MN-Core 2 press release
           (projects.preferred.jp/mn-core/en/, 2022-12-14): clock, peak TFLOPS, power.
  [ISA]    MN-Core 2 software developer manual, section "word length and precision":
           the 1-6-9 half format (1.0 == 0x3e00).
  [MODEL]  Not published. A modelling assumption of mnrt, chosen to be plausible and kept
           here so the timing model has one place to change; reported in profiles as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def _frozen(d: dict) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class DeviceSpec:
    """A frozen description of one accelerator; the emulator and cost model read only this."""

    arch: str = "mncore2"
    codename: str = "gpfn3"

    # Hierarchy [MLSDK 7.1.1]: Top -> 4 Group -> 2 L2B -> 8 L1B -> 16 MAB -> 4 PE.
    groups: int = 4
    l2b_per_group: int = 2
    l1b_per_l2b: int = 8
    mab_per_l1b: int = 16
    pe_per_mab: int = 4
    # A PE's local memory is addressed in 64-bit long words of two 32-bit words (the `W`
    # unit of the MN-Core layout notation).
    words_per_long_word: int = 2

    # Memories [MLSDK 7.1.2]. LM and GRF come in two banks per PE.
    lm_bytes_per_pe: int = 2 * 16 * KiB
    grf_bytes_per_pe: int = 2 * 2 * KiB
    l1bm_bytes_per_l1b: int = 64 * KiB
    l2bm_bytes_per_l2b: int = 256 * KiB
    pdm_bytes_per_group: int = 4 * MiB
    dram_bytes_per_group: int = 4 * GiB

    # Bandwidths in bytes/s. DRAM: about 128 GB/s per group [MLSDK 7.1.2].
    dram_bandwidth_per_group: float = 128e9
    # On-chip SRAM bandwidths are not published [MODEL]: 64 B/cycle per L1B, 128 B/cycle
    # per L2B at the core clock.
    l1bm_bytes_per_cycle_per_l1b: int = 64
    l2bm_bytes_per_cycle_per_l2b: int = 128
    # A PE reads or writes one long word (8 bytes) of its local memory per cycle [MODEL].
    lm_bytes_per_cycle_per_pe: int = 8

    clock_hz: float = 750e6  # [PFN]

    # Peak TFLOPS at 750 MHz [PFN]; "pfloat" is MN-Core's pseudo-single precision.
    peak_tflops: Mapping[str, float] = field(
        default_factory=lambda: _frozen(
            {"double": 12.3, "float": 49.2, "pfloat": 98.3, "half": 393.2}
        )
    )
    board_power_w: float = 330.0  # [PFN] about 330 W per board

    # Timing and energy model constants [MODEL]; the model itself is in device/cost.py.
    # Non-matrix kernels run on the PE vector ALUs, not the MAU: a quarter of matrix peak.
    vector_peak_fraction: float = 0.25
    # Fixed cost to dispatch one kernel (instruction stream set-up from the host).
    kernel_launch_s: float = 2e-6
    # Host <-> device copies cross PCIe 4.0 x16, about 25 GB/s usable.
    host_link_bandwidth: float = 25e9
    # Energy: the dynamic share of board power at half peak spread over its flops gives
    # ~0.5 pJ/flop in half; other precisions cost in proportion to their lower peak.
    energy_pj_per_flop_half: float = 0.5
    energy_pj_per_byte_dram: float = 40.0  # ~5 pJ/bit, typical of LPDDR-class DRAM
    energy_pj_per_byte_sram: float = 1.0
    static_power_w: float = 60.0
    # Cycles a PE spends between two k-steps of a mapped matrix kernel (swapping its
    # double-buffered LM slabs, synchronising with the L1BM broadcast): see device/mapping.py.
    mapping_step_cycles: int = 32

    # DRAM allocation granule [MODEL]: the data engines move 64-bit long words in bursts.
    dram_alignment: int = 256

    def __hash__(self) -> int:
        # Hashable like any frozen dataclass, its read-only mappings as item tuples: the
        # host keys kernel prices by the spec they were computed for, once per kernel run,
        # so the hash is worked out once.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(
                tuple(
                    tuple(sorted(v.items())) if isinstance(v, Mapping) else v
                    for v in (getattr(self, f.name) for f in fields(self))
                )
            )
            object.__setattr__(self, "_hash", cached)
        return cached

    # ---- derived facts: computed, never stored twice --------------------------------
    @property
    def l2b_count(self) -> int:
        return self.groups * self.l2b_per_group

    @property
    def l1b_count(self) -> int:
        return self.l2b_count * self.l1b_per_l2b

    @property
    def mab_count(self) -> int:
        return self.l1b_count * self.mab_per_l1b

    @property
    def pe_count(self) -> int:
        return self.mab_count * self.pe_per_mab

    @property
    def dram_bytes(self) -> int:
        return self.groups * self.dram_bytes_per_group

    @property
    def dram_bandwidth(self) -> float:
        return self.groups * self.dram_bandwidth_per_group

    @property
    def l1bm_bandwidth(self) -> float:
        return self.l1b_count * self.l1bm_bytes_per_cycle_per_l1b * self.clock_hz

    @property
    def l2bm_bandwidth(self) -> float:
        return self.l2b_count * self.l2bm_bytes_per_cycle_per_l2b * self.clock_hz

    @property
    def lm_bandwidth(self) -> float:
        return self.pe_count * self.lm_bytes_per_cycle_per_pe * self.clock_hz

    def peak_flops(self, precision: str) -> float:
        """Matrix-unit peak in flop/s for a precision name of `peak_tflops`."""
        return self.peak_tflops[precision] * 1e12

    def energy_pj_per_flop(self, precision: str) -> float:
        return self.energy_pj_per_flop_half * self.peak_tflops["half"] / self.peak_tflops[precision]

    def describe(self) -> dict:
        """A flat JSON-ready summary of the main figures (arch, PEs, clock, DRAM, peaks, power)."""
        return {
            "arch": self.arch,
            "codename": self.codename,
            "pe_count": self.pe_count,
            "clock_hz": self.clock_hz,
            "dram_bytes": self.dram_bytes,
            "dram_bandwidth": self.dram_bandwidth,
            "peak_tflops": dict(self.peak_tflops),
            "board_power_w": self.board_power_w,
        }


MNCORE2 = DeviceSpec()
