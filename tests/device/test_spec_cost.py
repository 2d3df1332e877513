"""DeviceSpec facts and the timing/energy model."""

from __future__ import annotations

import dataclasses
import math

import pytest

from mnrt.device import cost
from mnrt.device.kernels import Cost
from mnrt.device.spec import MNCORE2, GiB


def test_hierarchy_and_memory_facts():
    assert MNCORE2.pe_count == 4096
    assert MNCORE2.l1b_count == 64 and MNCORE2.mab_count == 1024
    assert MNCORE2.dram_bytes == 16 * GiB
    assert MNCORE2.dram_bandwidth == pytest.approx(512e9)
    assert dict(MNCORE2.peak_tflops) == {
        "double": 12.3,
        "float": 49.2,
        "pfloat": 98.3,
        "half": 393.2,
    }
    assert MNCORE2.clock_hz == 750e6


def test_spec_is_frozen():
    with pytest.raises(AttributeError):
        MNCORE2.clock_hz = 1e9
    with pytest.raises(TypeError):
        MNCORE2.peak_tflops["half"] = 1.0


def test_compute_bound_gemm_runs_at_peak():
    n = 4096
    c = Cost(flops=2.0 * n**3, dram_bytes=3 * n * n * 2, parallel=(n // 4) ** 2, matrix=True)
    m = cost.model_kernel(MNCORE2, c, "half")
    assert m.bound == "compute"
    assert m.time_s == pytest.approx(MNCORE2.kernel_launch_s + 2.0 * n**3 / 393.2e12)


def test_memory_bound_kernel_uses_dram_bandwidth():
    c = Cost(flops=1e6, dram_bytes=1e9)
    m = cost.model_kernel(MNCORE2, c, "float")
    assert m.bound == "dram"
    assert m.time_s == pytest.approx(MNCORE2.kernel_launch_s + 1e9 / 512e9)


def test_partial_wave_lowers_utilisation():
    assert cost.utilisation(MNCORE2, 4096) == 1.0
    assert cost.utilisation(MNCORE2, 4097) == pytest.approx(4097 / 8192)
    assert cost.utilisation(MNCORE2, 0) == 1.0


def test_energy_includes_static_and_dynamic_parts():
    m = cost.model_kernel(MNCORE2, Cost(flops=1e9, dram_bytes=1e6), "half")
    dynamic = 1e-12 * (1e9 * 0.5 + 1e6 * 40.0)
    assert m.energy_j == pytest.approx(dynamic + MNCORE2.static_power_w * m.time_s)


def test_empty_kernel_costs_only_the_launch():
    m = cost.model_kernel(MNCORE2, Cost(flops=0.0, dram_bytes=0.0), "float")
    assert m.bound == "launch" and m.time_s == MNCORE2.kernel_launch_s


def test_model_is_deterministic_and_finite():
    c = Cost(flops=123.0, dram_bytes=456.0, sram_bytes=789.0, parallel=17)
    a = cost.model_kernel(MNCORE2, c, "double")
    assert a == cost.model_kernel(MNCORE2, c, "double")
    assert all(math.isfinite(v) for v in (a.time_s, a.energy_j))
    t = cost.model_transfer(MNCORE2, 25_000_000)
    assert t.time_s == pytest.approx(1e-3) and t.bound == "link"


def test_specs_hash_by_value():
    """The host keys cached kernel prices by spec: equal specs must share a hash and a
    changed one must not hit another's entries."""
    faster = dataclasses.replace(MNCORE2, clock_hz=1e9)
    assert hash(dataclasses.replace(MNCORE2)) == hash(MNCORE2)
    assert faster != MNCORE2 and len({MNCORE2, faster, dataclasses.replace(MNCORE2)}) == 2
