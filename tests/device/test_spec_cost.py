"""DeviceSpec facts and the timing/energy model."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

import mnrt
from mnrt.device import cost
from mnrt.device import dtypes as dt
from mnrt.device.emulator import EmulatedDevice
from mnrt.device.kernels import Cost, TensorSpec, lookup
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


H, F, D, I32, B = dt.HALF, dt.FLOAT, dt.DOUBLE, dt.INT32, dt.BOOL


@pytest.fixture(scope="module")
def backend():
    return EmulatedDevice(0, "cost")


def price(backend, op, ins, attrs=None):
    kdef = lookup(op)
    attrs = kdef.check_attrs(attrs or {})
    specs = [TensorSpec(shape, d) for shape, d in ins]
    outs = [TensorSpec(o.shape, o.dtypes[0]) for o in kdef.infer(specs, attrs)]
    return backend.kernel_cost(kdef, specs, outs, attrs)


def test_a_4096_cubed_half_gemm_runs_near_the_half_peak(backend):
    n = 4096
    for out in (H, F):  # half, and mixed (half in, float out): both at the half peak
        kdef = lookup("gemm")
        ins = [TensorSpec((n, n), H), TensorSpec((n, n), H)]
        m = backend.kernel_cost(kdef, ins, [TensorSpec((n, n), out)], kdef.check_attrs({}))
        assert m.flops == 2.0 * n**3
        assert 0.99 * 393.2e12 <= m.flops / m.time_s <= 393.2e12


def test_an_elementwise_op_on_a_gib_is_dram_bound_at_the_documented_bandwidth(backend):
    m = price(backend, "relu", [((GiB // 4,), F)])
    assert m.bound == "dram" and m.dram_bytes == 2 * GiB
    assert m.time_s == pytest.approx(MNCORE2.kernel_launch_s + 2 * GiB / (4 * 128e9))


@pytest.mark.parametrize(("out", "cols"), [(H, 4), (F, 5)])
def test_a_bigger_gemm_never_costs_less(backend, out, cols):
    """A ragged 4x4 MAU block takes its PE for the whole wave: 5 rows cost no less than 4."""
    kdef, k = lookup("gemm"), 1 << 20
    costs = [
        backend.kernel_cost(
            kdef,
            [TensorSpec((rows, k), H), TensorSpec((k, cols), H)],
            [TensorSpec((rows, cols), out)],
            kdef.check_attrs({}),
        )
        for rows in range(1, 10)
    ]
    for rows, (a, b) in enumerate(itertools.pairwise(costs), start=2):
        assert b.time_s >= a.time_s and b.energy_j >= a.energy_j, rows


def test_a_conv_with_more_output_channels_never_costs_less(backend):
    costs = [
        price(backend, "conv2d", [((1, 512, 8, 8), H), ((o, 512, 3, 3), H)], {"padding": (1,) * 4})
        for o in range(1, 13)
    ]
    for a, b in itertools.pairwise(costs):
        assert b.time_s >= a.time_s and b.energy_j >= a.energy_j


def test_gemm_and_conv_flops_count_the_c_term_scales_and_bias(backend):
    a, b, c = ((8, 16), H), ((16, 4), H), ((8, 4), H)
    per = {
        (): 32,
        ("c",): 33,
        ("c", "beta"): 34,
        ("c", "beta", "alpha"): 35,
        ("c", "beta0"): 32,
    }
    for what, flops_per_out in per.items():
        attrs = {"alpha": 2.0 if "alpha" in what else 1.0}
        attrs["beta"] = 0.5 if "beta" in what else 0.0 if "beta0" in what else 1.0
        ins = [a, b, c] if "c" in what else [a, b]
        assert price(backend, "gemm", ins, attrs).flops == flops_per_out * 8 * 4, what
    x, w = ((1, 3, 5, 5), F), ((2, 3, 3, 3), F)
    plain = price(backend, "conv2d", [x, w]).flops
    assert plain == 2 * 27 * 2 * 3 * 3
    assert price(backend, "conv2d", [x, w, ((2,), F)]).flops == plain + 2 * 3 * 3


def test_where_computes_in_its_datas_precision_not_its_conditions(backend):
    n = 1 << 20
    where = price(backend, "where", [((n,), B), ((n,), D), ((n,), D)])
    pj = 1e-12 * (n * MNCORE2.energy_pj_per_flop("double") + where.dram_bytes * 40.0)
    assert where.energy_j == pytest.approx(pj + MNCORE2.static_power_w * where.time_s)


# Calls whose operands a program may keep on chip, at sizes where every term matters.
ONCHIP_CASES = [
    ("relu", [((1 << 20,), F)], {}),
    ("add", [((1024, 1024), F), ((1024,), F)], {}),
    ("slice", [((1 << 22,), F)], {"starts": (0,), "ends": (4,)}),
    ("gather", [((1 << 16, 64), F), ((4,), I32)], {}),
    ("gemm", [((4096, 4096), H), ((4096, 4096), H)], {}),
    ("conv2d", [((8, 256, 32, 32), H), ((256, 256, 3, 3), H)], {"padding": (1,) * 4}),
    ("sum", [((512, 4096), F)], {"axes": (1,)}),
]


@pytest.mark.parametrize(("op", "ins", "attrs"), ONCHIP_CASES, ids=[c[0] for c in ONCHIP_CASES])
def test_operands_kept_on_chip_never_cost_more_than_in_dram(backend, op, ins, attrs):
    in_dram = price(backend, op, ins, attrs)
    positions = range(len(ins) + 1)
    for r in range(1, len(positions) + 1):
        for onchip in itertools.combinations(positions, r):
            kept = price(backend, op, ins, {**attrs, "onchip": onchip})
            assert kept.time_s <= in_dram.time_s, onchip
            assert kept.energy_j <= in_dram.energy_j, onchip
            assert 0.0 <= kept.dram_bytes < in_dram.dram_bytes, onchip


def test_a_slice_of_an_on_chip_tensor_still_writes_its_result_to_dram(backend):
    big, attrs = [((1 << 22,), F)], {"starts": (0,), "ends": (4,)}
    assert price(backend, "slice", big, attrs).dram_bytes == 32.0
    assert price(backend, "slice", big, {**attrs, "onchip": (0,)}).dram_bytes == 16.0
    table, idx = ((1 << 16, 64), F), ((4,), I32)
    gathered = price(backend, "gather", [table, idx], {"onchip": (0,)})
    assert gathered.dram_bytes == 16.0 + 4 * 64 * 4  # the indices, and the rows written


def test_program_and_queue_totals_are_the_sums_of_their_parts():
    with mnrt.open_device(0) as dev:
        x = dev.create_buffer((64, 32), "float", name="x")
        w = dev.create_buffer((32, 16), "float", name="w")
        h = dev.create_buffer((64, 16), "float", name="h")
        y = dev.create_buffer((64, 16), "float", name="y")
        kernels = [
            mnrt.Kernel("gemm", ["x", "w"], ["h"]),
            mnrt.Kernel("relu", ["h"], ["y"], {"onchip": (0,)}),
            mnrt.Kernel("softmax", ["y"], ["y"]),
        ]
        prog = dev.create_program(kernels)
        q = dev.command_queue(0)
        q.enqueue_write_buffer(x, np.ones((64, 32), np.float32))
        q.enqueue_write_buffer(w, np.ones((32, 16), np.float32))
        for _ in range(3):
            q.enqueue_program(prog, {"x": x, "w": w, "h": h, "y": y})
        q.finish()
        binding = {"x": x, "w": w, "h": h, "y": y}
        steps = prog.plan(binding).steps
        parts = [
            dev._backend.kernel_cost(
                k.kdef, [b.spec for b in s.ins], [b.spec for b in s.outs], k.attrs
            )
            for k, s in zip(kernels, steps)
        ]
        total = prog.plan(binding).modelled
        assert total.time_s == sum(p.time_s for p in parts)
        assert total.energy_j == sum(p.energy_j for p in parts)
        history = [c.modelled for c in q.history if c.modelled is not None]
        stats = q.stats()
        assert stats["device_time_s"] == sum(m.time_s for m in history)
        assert stats["energy_j"] == sum(m.energy_j for m in history)
