"""The mapping-aware model (device/mapping.py): published peaks for large products, sensible
losses for small and badly shaped ones, resources named when a mapping does not fit, and the
mapping stored in the binary deciding what a replay models."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler.mapper import Metrics, map_kernel
from mnrt.device.dtypes import DOUBLE, FLOAT, HALF
from mnrt.device.kernels.registry import TensorSpec
from mnrt.device.mapping import GRF, LM, Mapping, check, problem_of
from mnrt.device.spec import MNCORE2
from mnrt.errors import KernelAttributeError


def gemm(m, n, k, dtype=HALF, out=None):
    kernel = mnrt.Kernel("gemm", ["a", "b"], ["y"])
    ops = {
        "a": TensorSpec((m, k), dtype),
        "b": TensorSpec((k, n), dtype),
        "y": TensorSpec((m, n), out or dtype),
    }
    return kernel, ops


def utilisation(kernel, ops, precision):
    best = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops).best
    flops = 2.0 * np.prod([ops["a"].shape[0], ops["b"].shape[1], ops["a"].shape[1]])
    return flops / best.time_s / MNCORE2.peak_flops(precision)


@pytest.mark.parametrize(
    ("dtype", "precision"), [(HALF, "half"), (FLOAT, "float"), (DOUBLE, "double")]
)
def test_a_large_gemm_models_at_the_published_peak(dtype, precision):
    assert utilisation(*gemm(4096, 4096, 4096, dtype), precision) >= 0.9


def test_small_and_badly_shaped_gemms_lose_utilisation():
    square = utilisation(*gemm(4096, 4096, 4096), "half")
    thin = utilisation(*gemm(4096, 4, 4096), "half")
    small = utilisation(*gemm(16, 16, 16), "half")
    ragged = utilisation(*gemm(4095, 4095, 4095), "half")
    # 16^3 is all launch; a thin product is bound by reading its 32 MiB operand from DRAM.
    assert small < 0.001 < thin < 0.05 < 0.8 < ragged < square


def test_a_bigger_product_never_models_faster():
    times = [map_kernel(*gemm(n, n, n)[:1], operands=gemm(n, n, n)[1]).best.time_s
             for n in (64, 128, 256, 512, 1024)]  # fmt: skip
    assert times == sorted(times)


def test_check_names_the_resource_a_mapping_does_not_fit():
    _, ops = gemm(1024, 1024, 1024)
    p = problem_of("gemm", [ops["a"], ops["b"]], [ops["y"]], {}, 2.0 * 1024**3)
    assert "GRF" in check(MNCORE2, p, Mapping(1, 64, 64, 1, 64, 64, 16, GRF))
    assert check(MNCORE2, p, Mapping(1, 64, 64, 1, 64, 64, 16, LM)) is None
    assert "LM" in check(MNCORE2, p, Mapping(1, 64, 64, 1, 64, 64, 1024, LM))
    assert "PE array" in check(MNCORE2, p, Mapping(2, 64, 64, 1, 4, 4, 16))
    assert "L2BM" in check(MNCORE2, p, Mapping(1, 64, 64, 1, 32, 32, 16, GRF, keep=1))
    assert check(MNCORE2, p, Mapping(1, 16, 64, 1, 4, 32, 16, GRF, keep=1)) is None


def test_a_mapping_attribute_is_checked_where_the_kernel_is_made():
    with pytest.raises(KernelAttributeError, match="only gemm, conv2d"):
        mnrt.Kernel("relu", ["x"], ["y"], {"mapping": (1, 1, 1, 1, 4, 4, 16, 1, 0)})
    with pytest.raises(KernelAttributeError, match="9 ints"):
        mnrt.Kernel("gemm", ["a", "b"], ["y"], {"mapping": (1, 2)})
    with pytest.raises(KernelAttributeError, match="MAU block"):
        mnrt.Kernel("gemm", ["a", "b"], ["y"], {"mapping": (1, 1, 1, 1, 3, 4, 16, 1, 0)})
    with pytest.raises(KernelAttributeError, match="accum"):
        mnrt.Kernel("gemm", ["a", "b"], ["y"], {"mapping": (1, 1, 1, 1, 4, 4, 16, 7, 0)})


def _run(kernels, arrays, out_shape, dtype):
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        bufs = {}
        for name, arr in arrays.items():
            bufs[name] = dev.create_buffer(arr.shape, dtype, name=name)
            q.enqueue_write_buffer(bufs[name], arr)
        bufs["y"] = dev.create_buffer(out_shape, dtype, name="y")
        prog = dev.create_program(kernels)
        plan = prog.plan(bufs)
        q.enqueue_program(prog, bufs)
        return q.enqueue_read_buffer(bufs["y"], blocking=True), plan.modelled


def test_a_mapping_decides_modelled_time_not_results():
    rng = np.random.default_rng(0)
    arrays = {"a": rng.standard_normal((64, 96)).astype(np.float32),
              "b": rng.standard_normal((96, 80)).astype(np.float32)}  # fmt: skip
    kernel, ops = gemm(64, 80, 96, FLOAT)
    front = map_kernel(kernel, operands=ops)
    plain, _ = _run([kernel], arrays, (64, 80), "float")
    for point in front.points:
        y, modelled = _run(point.kernels, arrays, (64, 80), "float")
        np.testing.assert_array_equal(y, plain)
        assert modelled.time_s == pytest.approx(point.time_s, rel=1e-12)
        assert modelled.energy_j == pytest.approx(point.energy_j, rel=1e-12)
    naive = mnrt.Kernel("gemm", ["a", "b"], ["y"], {"mapping": (1, 16, 16, 1, 4, 4, 16, LM, 0)})
    _, slow = _run([naive], arrays, (64, 80), "float")
    assert slow.time_s > front.best.time_s


def test_a_mapping_that_does_not_fit_its_operands_is_an_error_when_bound():
    arrays = {"a": np.ones((8, 8), np.float32), "b": np.ones((8, 8), np.float32)}
    bad = mnrt.Kernel("gemm", ["a", "b"], ["y"], {"mapping": (1, 64, 64, 1, 64, 64, 16, GRF, 0)})
    with pytest.raises(KernelAttributeError, match="GRF"):
        _run([bad], arrays, (8, 8), "float")


def test_the_mapping_travels_in_the_binary_and_replays_to_the_same_time(tmp_path):
    kernel, ops = gemm(64, 64, 64, FLOAT)
    point = map_kernel(kernel, operands=ops, metrics=Metrics.LATENCY).best
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        bufs = {n: dev.create_buffer((64, 64), "float", name=n) for n in "aby"}
        prog = dev.create_program(point.kernels, name="g")
        q.enqueue_write_buffer(bufs["a"], np.ones((64, 64), np.float32))
        q.enqueue_write_buffer(bufs["b"], np.ones((64, 64), np.float32))
        q.enqueue_program(prog, bufs)
        q.enqueue_read_buffer(bufs["y"])
        binary = mnrt.end_capture()
    path = tmp_path / "g.mnlb"
    binary.save(path)
    report = mnrt.replay(path)
    assert report.passed
    write = 2 * 64 * 64 * 4 / MNCORE2.host_link_bandwidth
    assert report.timings["device_time_s"] == pytest.approx(
        point.time_s + write + 64 * 64 * 4 / MNCORE2.host_link_bandwidth, rel=1e-9
    )


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        st.lists(st.integers(0, 1 << 21), min_size=9, max_size=9),
        st.tuples(
            *[st.sampled_from([1, 2, 16, 64, 4096, 1 << 20])] * 4,
            *[st.integers(1, 1 << 18).map(lambda v: 4 * v)] * 2,
            st.integers(1, 1 << 20),
            st.sampled_from([1, 2]),
            st.sampled_from([0, 1, 2]),
        ),
    ),
    st.integers(1, 96),
    st.integers(1, 96),
)
def test_any_mapping_a_binary_holds_is_refused_by_name_or_models_finitely(values, m, k):
    try:
        kernel = mnrt.Kernel("gemm", ["a", "b"], ["y"], {"mapping": tuple(values)})
    except KernelAttributeError:
        return
    arrays = {"a": np.ones((m, k), np.float32), "b": np.ones((k, 8), np.float32)}
    try:
        _, modelled = _run([kernel], arrays, (m, 8), "float")
    except KernelAttributeError as e:
        assert "cannot run this gemm" in str(e)
        return
    assert 0 < modelled.time_s < float("inf") and modelled.energy_j > 0


def test_the_pe_grid_folds_onto_the_hierarchy_innermost_first():
    assert Mapping(1, 64, 64, 1, 32, 32, 16).hierarchy(MNCORE2) == {
        "L2B": 8, "L1B": 8, "MAB": 16, "PE": 4,
    }  # fmt: skip
    assert Mapping(1, 2, 4, 1, 4, 4, 16).hierarchy(MNCORE2) == {
        "L2B": 1, "L1B": 1, "MAB": 2, "PE": 4,
    }  # fmt: skip
