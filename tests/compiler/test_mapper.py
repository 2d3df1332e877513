"""The Pareto mapper (compiler/mapper.py): the optimum of the whole space with far fewer
evaluations, fronts of mutually undominated runnable points, tolerances, fused chains and
its explanation of what it turned down."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import MapperError, Metrics, map_kernel
from mnrt.compiler.mapper import brute_force, space
from mnrt.device.dtypes import FLOAT, HALF
from mnrt.device.kernels.registry import TensorSpec
from mnrt.device.mapping import check, evaluate, problem_of
from mnrt.device.spec import MNCORE2

ALL = Metrics.LATENCY | Metrics.ENERGY | Metrics.RESOURCE_USAGE


def gemm(m, n, k, dtype=HALF, batch=()):
    kernel = mnrt.Kernel("gemm", ["a", "b"], ["y"])
    ops = {"a": TensorSpec((*batch, m, k), dtype), "b": TensorSpec((*batch, k, n), dtype),
           "y": TensorSpec((*batch, m, n), dtype)}  # fmt: skip
    return kernel, ops


def conv(n, c, hw, o, kk, stride=1, groups=1):
    kernel = mnrt.Kernel("conv2d", ["x", "w"], ["y"], {"stride": (stride, stride),
                                                      "groups": groups})  # fmt: skip
    out = (hw - kk) // stride + 1
    ops = {"x": TensorSpec((n, c, hw, hw), HALF), "w": TensorSpec((o, c // groups, kk, kk), HALF),
           "y": TensorSpec((n, o, out, out), HALF)}  # fmt: skip
    return kernel, ops


dims = st.integers(1, 300)


def _times(kernel, ops) -> list[float]:
    """Every valid mapping's modelled time: brute force."""
    ins = [ops[s] for s in kernel.inputs]
    outs = [ops[s] for s in kernel.outputs]
    p = problem_of(
        kernel.op, ins, outs, kernel.attrs, kernel.kdef.cost(ins, outs, kernel.attrs).flops
    )
    return [evaluate(MNCORE2, p, mp).modelled.time_s
            for mp in space(MNCORE2, p, 3) if check(MNCORE2, p, mp) is None]  # fmt: skip


@settings(max_examples=15, deadline=None)
@given(dims, dims, dims, st.sampled_from([(), (3,)]))
@example(m=1, n=1, k=33, batch=())  # launch-bound: 93 of 150 mappings within 5%
def test_the_mapper_finds_the_brute_force_optimum_with_far_fewer_evaluations(m, n, k, batch):
    kernel, ops = gemm(m, n, k, batch=batch)
    front = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops)
    best, count = brute_force(kernel, operands=ops)
    assert front.best.time_s == pytest.approx(best, rel=1e-12)
    assert count == front.space_size
    if front.evaluated * 10 > count:
        # A launch-bound product (m = n = 1, say) has most of its mappings within a few
        # percent of the fastest: no bound prunes them, and the tie is broken by energy.
        close = sum(t <= best * 1.05 for t in _times(kernel, ops))
        assert 2 * close >= count, (front.evaluated, close, count)


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 2), st.sampled_from([3, 16, 32]), st.integers(5, 20),
       st.sampled_from([8, 24, 64]), st.sampled_from([1, 3]))  # fmt: skip
def test_the_mapper_finds_the_conv_optimum(n, c, hw, o, kk):
    kernel, ops = conv(n, c, hw, o, kk)
    front = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops)
    best, count = brute_force(kernel, operands=ops)
    assert front.best.time_s == pytest.approx(best, rel=1e-12)
    assert front.evaluated < count


def _fastest_of_least_energy(kernel, ops, grid) -> tuple[float, float]:
    """(time, energy) of the mapping of least energy among the fastest on PE `grid`
    (b, m, n, k): brute force."""
    ins = [ops[s] for s in kernel.inputs]
    outs = [ops[s] for s in kernel.outputs]
    p = problem_of(
        kernel.op, ins, outs, kernel.attrs, kernel.kdef.cost(ins, outs, kernel.attrs).flops
    )
    points = [
        (ev.time_s, ev.energy_j)
        for mp in space(MNCORE2, p, 3)
        if (mp.pe_b, mp.pe_m, mp.pe_n, mp.pe_k) == grid and check(MNCORE2, p, mp) is None
        for ev in [evaluate(MNCORE2, p, mp).modelled]
    ]
    return min(points)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 96), st.integers(1, 96), st.integers(1, 96))
def test_of_equally_fast_mappings_latency_alone_picks_the_least_energy(m, n, k):
    """What a compile asks for: a tie on latency is broken by energy, as Front.best orders,
    among the mappings of the fastest one's PE grid (which decides the layouts)."""
    kernel, ops = gemm(m, n, k)
    best = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops).best
    grid = (best.mapping.pe_b, best.mapping.pe_m, best.mapping.pe_n, best.mapping.pe_k)
    time_s, energy_j = _fastest_of_least_energy(kernel, ops, grid)
    assert best.time_s == pytest.approx(brute_force(kernel, operands=ops)[0], rel=1e-12)
    assert best.time_s == pytest.approx(time_s, rel=1e-12)
    assert best.energy_j == pytest.approx(energy_j, rel=1e-12)


def test_a_tie_on_a_resnet_shape_goes_to_the_least_energy():
    """On its grid, the first of the equally fast had cost 8% more energy than the least
    (a ResNet-50 1x1 convolution: 578 against 536 uJ)."""
    kernel, ops = conv(1, 256, 56, 64, 1)
    best = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops).best
    grid = (best.mapping.pe_b, best.mapping.pe_m, best.mapping.pe_n, best.mapping.pe_k)
    assert (best.time_s, best.energy_j) == pytest.approx(
        _fastest_of_least_energy(kernel, ops, grid)
    )
    assert best.energy_j < 560e-6


def test_a_front_holds_only_mutually_undominated_points():
    kernel, ops = gemm(512, 384, 256)
    front = map_kernel(kernel, metrics=ALL, operands=ops)
    assert len(front.points) > 1
    vecs = [(p.time_s, p.energy_j, p.usage) for p in front.points]
    for i, a in enumerate(vecs):
        for j, b in enumerate(vecs):
            assert i == j or not all(x <= y for x, y in zip(b, a))
    # Latency alone keeps one point: the fastest of the three-metric front.
    fast = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops)
    assert fast.best.time_s == min(p.time_s for p in front.points)


def test_tolerances_thin_the_front():
    kernel, ops = gemm(512, 384, 256)
    exact = map_kernel(kernel, metrics=ALL, operands=ops)
    loose = map_kernel(kernel, metrics=ALL, operands=ops, objective_tolerance=0.2,
                       resource_usage_tolerance=0.5)  # fmt: skip
    assert len(loose.points) < len(exact.points)
    assert loose.best.time_s <= exact.best.time_s * 1.2


@given(st.integers(1, 200), st.integers(1, 200), st.integers(1, 200))
@settings(max_examples=10, deadline=None)
def test_more_effort_never_models_slower(m, n, k):
    kernel, ops = gemm(m, n, k)
    times = [map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops, effort=e).best.time_s
             for e in range(5)]  # fmt: skip
    assert times == sorted(times, reverse=True)


def test_a_fused_chain_keeps_the_intermediate_on_chip_when_it_fits():
    mm = mnrt.Kernel("gemm", ["a", "b"], ["h"])
    act = mnrt.Kernel("relu", ["h"], ["y"])
    ops = {"a": TensorSpec((256, 256), FLOAT), "b": TensorSpec((256, 256), FLOAT),
           "h": TensorSpec((256, 256), FLOAT), "y": TensorSpec((256, 256), FLOAT)}  # fmt: skip
    front = map_kernel([mm, act], metrics=Metrics.LATENCY, operands=ops)
    assert front.best.fused
    kernels = front.best.kernels
    assert kernels[0].attrs["onchip"] == (2,) and kernels[1].attrs["onchip"] == (0,)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        bufs = {n: dev.create_buffer((256, 256), "float", name=n) for n in "abhy"}
        q.enqueue_write_buffer(bufs["a"], a)
        q.enqueue_write_buffer(bufs["b"], b)
        prog = dev.create_program(kernels)
        assert prog.plan(bufs).modelled.time_s == pytest.approx(front.best.time_s, rel=1e-12)
        q.enqueue_program(prog, bufs)
        y = q.enqueue_read_buffer(bufs["y"], blocking=True)
    np.testing.assert_allclose(y, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-3)
    # Too big to keep on chip: every fused mapping is turned down for LM.
    big = {n: TensorSpec((8192, 8192), FLOAT) for n in "abhy"}
    front = map_kernel([mm, act], metrics=Metrics.LATENCY, operands=big, effort=1)
    assert not front.best.fused
    assert any(r.fused and r.reason.startswith("LM: keeping") for r in front.rejected)


def test_explain_names_what_ruled_each_alternative_out():
    kernel, ops = gemm(2048, 2048, 2048)
    text = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops).explain()
    assert text.startswith("chosen: pe ")
    assert "GRF: accumulators need" in text
    assert "rejected:" in text and "searched" in text


def test_bad_requests_are_errors_that_say_what_to_give():
    with pytest.raises(MapperError, match="kernels with one: gemm, conv2d"):
        map_kernel(mnrt.Kernel("relu", ["x"], ["y"]), operands={})
    kernel, ops = gemm(8, 8, 8)
    with pytest.raises(MapperError, match="no shape for slot 'b'"):
        map_kernel(kernel, operands={"a": ops["a"], "y": ops["y"]})
    with pytest.raises(MapperError, match="effort"):
        map_kernel(kernel, operands=ops, effort=9)
    with pytest.raises(MapperError, match="does not read"):
        map_kernel([kernel, mnrt.Kernel("relu", ["q"], ["z"])], operands=ops)
