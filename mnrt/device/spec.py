"""`DeviceSpec`: every number mnrt knows about MN-Core 2, in one frozen place.

Sources, cited per field below:
  [MLSDK]  MN-Core MLSDK documentation, "7. Hardware Specification"
           (dev.mn-core.com/sdk/0.5/MLSDK/docs/en/hardware_specification.html): hierarchy,
           memory sizes.
  [PFN]    Preferred Networks, MN-Core project page and MN-Core 2 press release
           (projects.preferred.jp/mn-core/en/, 2022-12-14): clock, peak TFLOPS, power.
  [ISA]    MN-Core 2 software developer manual, section "word length and precision":
           the 1-6-9 half format (1.0 == 0x3e00).
  [SRV]    Preferred Networks, MN-Server 2 (MN-Core 2 server) product material: 8 MN-Core 2
           boards per server, each on a PCIe Gen5 x16 slot of the host.
  [PCIE5]  PCI-SIG, PCI Express Base Specification 5.0: 32 GT/s per lane, 128b/130b
           encoding, so an x16 link carries 64 GB/s raw per direction (63.0 GB/s encoded).
  [MODEL]  Not published. A modelling assumption of mnrt, chosen to be plausible and kept
           here so the timing model has one place to change; reported in profiles as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType

from ..errors import InvalidArgumentError
from .modelled import Modelled

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def _frozen(d: dict) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class LinkSpec:
    """The links between the boards of one server, and what a copy across them costs.

    Each board sits on its own PCIe x16 link to a host PCIe switch; `boards_per_switch`
    boards share a switch, whose own x16 uplink goes to the host's root complex. A copy
    between two boards of one switch crosses two links (board -> switch -> board); between
    switches it crosses four (board -> switch -> host -> switch -> board). PCIe is full
    duplex, so each direction of each link is a resource of its own: `route` names those a
    copy occupies, and two copies that share one (two copies out of one board, or two
    copies whose boards sit behind one switch uplink) take turns on it.
    """

    name: str = "PCIe Gen5 x16"
    boards: int = 8  # boards in one server [SRV]
    # Two boards per host switch, four switches [MODEL]: the usual shape of 8-accelerator
    # PCIe servers (a switch per pair of x16 slots, two switches per CPU socket); the
    # MN-Server 2 block diagram is not published.
    boards_per_switch: int = 2
    lanes: int = 16  # [SRV]
    transfer_rate_gt_s: float = 32.0  # per lane [PCIE5]
    encoding_efficiency: float = 128 / 130  # [PCIE5]
    # Data share of the encoded bytes [MODEL]: 256-byte write payloads, each with about
    # 24 bytes of TLP header, framing, sequence number and LCRC, plus flow-control DLLPs.
    payload_efficiency: float = 256 / (256 + 24)
    # Fixed cost of one DMA copy [MODEL]: descriptor fetch, doorbell and completion write.
    latency_s: float = 1.0e-6
    # Store-and-forward-free (cut-through) latency of one PCIe switch [MODEL], the order
    # Gen5 switch datasheets give for port to port.
    switch_hop_s: float = 150e-9
    # Peer-to-peer through the host's root complex between switches [MODEL].
    root_hop_s: float = 500e-9
    # Energy per byte over each x16 link crossed [MODEL]: about 5 pJ/bit for a Gen5
    # SerDes pair (transmitter and receiver).
    energy_pj_per_byte: float = 40.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "name" and not value > 0:
                raise InvalidArgumentError(
                    f"LinkSpec.{f.name}={value!r}: it must be a positive number"
                )

    # ---- derived facts ---------------------------------------------------------------
    @property
    def published_bandwidth(self) -> float:
        """The headline figure per direction in bytes/s (64 GB/s for Gen5 x16), before
        encoding and packet overhead."""
        return self.lanes * self.transfer_rate_gt_s * 1e9 / 8

    @property
    def bandwidth(self) -> float:
        """Payload bytes/s one direction of a link carries: what a copy gets."""
        return self.published_bandwidth * self.encoding_efficiency * self.payload_efficiency

    @property
    def switches(self) -> int:
        return -(-self.boards // self.boards_per_switch)

    def switch_of(self, device: int) -> int:
        """The host switch a board sits behind. Devices past `boards` (MNRT_DEVICE_COUNT
        may name more) are modelled as further switches on the same host."""
        return _device_index(device) // self.boards_per_switch

    def route(self, src_device: int, dst_device: int) -> tuple[str, ...]:
        """The link directions a copy from `src_device` to `dst_device` occupies while it
        runs, in the order its bytes cross them; empty within one device."""
        src, dst = _device_index(src_device), _device_index(dst_device)
        if src == dst:
            return ()
        s, t = self.switch_of(src), self.switch_of(dst)
        if s == t:
            return (f"b{src}->sw{s}", f"sw{s}->b{dst}")
        return (f"b{src}->sw{s}", f"sw{s}->host", f"host->sw{t}", f"sw{t}->b{dst}")

    def host_route(self, device: int, to_device: bool) -> tuple[str, ...]:
        """The link directions a host transfer occupies: from the host down to `device`
        (a write) or up from it (a read), through its switch, as a copy crossing the host
        does on that side."""
        d = _device_index(device)
        s = self.switch_of(d)
        return (f"host->sw{s}", f"sw{s}->b{d}") if to_device else (f"b{d}->sw{s}", f"sw{s}->host")

    def copy_cost(self, src_device: int, dst_device: int, nbytes: int) -> Modelled:
        """The link's share of a copy between two boards: its time (latency of the DMA and
        of each switch and root-complex hop, then the bytes at `bandwidth`) and the energy
        of moving its bytes over every link crossed. `DeviceSpec.copy_cost` adds the DRAM
        reads and writes at both ends."""
        hops = self.route(src_device, dst_device)
        if not hops:
            raise InvalidArgumentError(
                f"a copy within device {src_device} does not cross the link: price it with "
                "DeviceSpec.local_copy_cost (or DeviceSpec.copy_cost, which picks)"
            )
        nbytes = _byte_count(nbytes)
        crosses_host = len(hops) > 2
        latency = (
            self.latency_s
            + self.switch_hop_s * (2 if crosses_host else 1)
            + (self.root_hop_s if crosses_host else 0.0)
        )
        return Modelled(
            time_s=latency + nbytes / self.bandwidth,
            energy_j=nbytes * self.energy_pj_per_byte * len(hops) * 1e-12,
            bound="link",
        )

    def describe(self) -> dict:
        """The link's figures and topology, JSON-ready (for `mnrt smi list`)."""
        return {
            "name": self.name,
            "boards": self.boards,
            "boards_per_switch": self.boards_per_switch,
            "published_bandwidth": self.published_bandwidth,
            "bandwidth": self.bandwidth,
            "latency_s": {
                "same_switch": self.copy_cost(0, 1, 0).time_s
                if self.boards_per_switch > 1
                else None,
                "across_switches": self.copy_cost(0, self.boards_per_switch, 0).time_s,
            },
            "energy_pj_per_byte_per_link": self.energy_pj_per_byte,
        }


def _device_index(device: int) -> int:
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise InvalidArgumentError(
            f"device {device!r} is not a device index: use a whole number from 0"
        )
    return device


def _byte_count(nbytes: int) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise InvalidArgumentError(f"nbytes={nbytes!r}: give a whole number of bytes from 0")
    return nbytes


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

    # The links to the other boards of the server [SRV], [PCIE5], [MODEL]: see LinkSpec.
    link: LinkSpec = field(default_factory=LinkSpec)

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

    # ---- derived facts: computed, never stored twice (computed once: the mapper reads them
    # for each of the up to a million mappings it weighs) ------------------------------
    @cached_property
    def l2b_count(self) -> int:
        return self.groups * self.l2b_per_group

    @cached_property
    def l1b_count(self) -> int:
        return self.l2b_count * self.l1b_per_l2b

    @cached_property
    def mab_count(self) -> int:
        return self.l1b_count * self.mab_per_l1b

    @cached_property
    def pe_count(self) -> int:
        return self.mab_count * self.pe_per_mab

    @cached_property
    def dram_bytes(self) -> int:
        return self.groups * self.dram_bytes_per_group

    @cached_property
    def dram_bandwidth(self) -> float:
        return self.groups * self.dram_bandwidth_per_group

    @cached_property
    def l1bm_bandwidth(self) -> float:
        return self.l1b_count * self.l1bm_bytes_per_cycle_per_l1b * self.clock_hz

    @cached_property
    def l2bm_bandwidth(self) -> float:
        return self.l2b_count * self.l2bm_bytes_per_cycle_per_l2b * self.clock_hz

    @cached_property
    def lm_bandwidth(self) -> float:
        return self.pe_count * self.lm_bytes_per_cycle_per_pe * self.clock_hz

    def peak_flops(self, precision: str) -> float:
        """Matrix-unit peak in flop/s for a precision name of `peak_tflops`."""
        return self.peak_tflops[precision] * 1e12

    def energy_pj_per_flop(self, precision: str) -> float:
        return self.energy_pj_per_flop_half * self.peak_tflops["half"] / self.peak_tflops[precision]

    def local_copy_cost(self, nbytes: int) -> Modelled:
        """A copy within one device, DRAM to DRAM: the same DMA set-up as a copy over the
        link (`link.latency_s`), then every byte read and written once at the device's
        DRAM bandwidth; so it never costs more than a copy between two devices."""
        moved = 2 * _byte_count(nbytes)
        time_s = self.link.latency_s + moved / self.dram_bandwidth
        return Modelled(
            time_s=time_s,
            energy_j=moved * self.energy_pj_per_byte_dram * 1e-12 + self.static_power_w * time_s,
            dram_bytes=float(moved),
            bound="dram",
        )

    def copy_cost(self, src_device: int, dst_device: int, nbytes: int) -> Modelled:
        """A copy command's whole cost, as a queue on one of its ends pays it: within one
        device `local_copy_cost`; between two, the link's time and energy
        (`link.copy_cost`) plus reading the source's DRAM, writing the destination's and
        the static power of the enqueuing device for the copy's time."""
        if src_device == dst_device:
            _device_index(src_device)
            return self.local_copy_cost(nbytes)
        link = self.link.copy_cost(src_device, dst_device, nbytes)
        moved = 2 * nbytes
        return Modelled(
            time_s=link.time_s,
            energy_j=link.energy_j
            + moved * self.energy_pj_per_byte_dram * 1e-12
            + self.static_power_w * link.time_s,
            dram_bytes=float(moved),
            bound="link",
        )

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
