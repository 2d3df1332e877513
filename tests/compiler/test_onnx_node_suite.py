"""ONNX's operator suite, generated from the installed onnx wheel, through the frontend and
the device: no case may give a wrong result or crash, and at least PASS_FLOOR cases pass.

One test per case module of the wheel (`onnx/backend/test/case/node/<op>.py`: importing it
generates its cases, so collection costs nothing); a failure lists its cases by name. All
cases share one Context. benchmarks/onnx_node_suite.py prints the same counts per op, with
onnxruntime's beside them.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx_suite

# A ratchet: raise it when more cases pass, never lower it (the target is 1,300).
PASS_FLOOR = 1560


@pytest.fixture(scope="module")
def ctx():
    with onnx_suite.one_context() as c:
        yield c


@functools.cache
def _results(module: str, ctx) -> tuple[onnx_suite.Result, ...]:
    return tuple(onnx_suite.run_mnrt(case, ctx) for case in onnx_suite.module_cases(module))


@pytest.mark.parametrize("module", onnx_suite.case_modules())
def test_no_case_is_wrong_or_crashes(module, ctx):
    results = _results(module, ctx)
    bad = [f"{r.verdict}: {r.case} ({r.op}): {r.detail}" for r in results
           if r.verdict in ("wrong", "crash")]  # fmt: skip
    assert not bad, f"{len(bad)} case(s) wrong or crashed:\n" + "\n".join(bad)


def test_at_o3_no_case_of_several_nodes_is_wrong_or_crashes(ctx):
    """The cases of several nodes (a function expanded into its body: layer and group norm,
    softmax cross-entropy, attention; a case that builds its inputs) compiled at O3, where
    runs of vector kernels become chains that take the other operands of their steps: the
    fusion keeps every result, and refuses nothing the default preset runs."""
    cases = [c for c in onnx_suite.node_cases() if len(c.model.graph.node) > 1]
    results = {c.name: onnx_suite.run_mnrt(c, ctx, preset="O3") for c in cases}
    default = {r.case: r for m in onnx_suite.case_modules() for r in _results(m, ctx)}
    bad = [f"{r.verdict}: {r.case} ({r.op}): {r.detail}" for r in results.values()
           if r.verdict in ("wrong", "crash") or default[r.case].verdict != r.verdict]  # fmt: skip
    assert not bad, f"{len(bad)} case(s) wrong, crashed or refused at O3:\n" + "\n".join(bad)
    assert len(results) > 300


# The ops float_dtype=mixed computes in half.
MATRIX_OPS = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "Attention"}


def test_at_o2_mixed_the_small_products_of_matrix_cases_run_in_float(ctx):
    """The cases of products (MatMul, Gemm, Conv, attention, ...) at O2 with
    float_dtype=mixed: each product is small, so half saves less than its casts cost and
    O2 runs it in float (compiler/precision.py), with no casts: every case gives the
    verdict it gives at float, to the suite's exact tolerance (with their products in
    half, 181 of them were wrong by half's rounding)."""
    cases = [c for c in onnx_suite.node_cases()
             if MATRIX_OPS & {n.op_type for n in c.model.graph.node}]  # fmt: skip
    default = {r.case: r for m in onnx_suite.case_modules() for r in _results(m, ctx)}
    results = [onnx_suite.run_mnrt(c, ctx, preset="O2", mixed=True) for c in cases]
    bad = [f"{r.verdict}: {r.case} ({r.op}): {r.detail}" for r in results
           if r.verdict != default[r.case].verdict]  # fmt: skip
    assert not bad, f"{len(bad)} case(s) differ at O2 mixed:\n" + "\n".join(bad)
    assert sum(r.verdict == "pass" for r in results) > 200


def test_enough_cases_pass(ctx):
    results = [r for m in onnx_suite.case_modules() for r in _results(m, ctx)]
    passed = sum(r.verdict == "pass" for r in results)
    assert passed >= PASS_FLOOR, f"{passed} of {len(results)} node cases pass, not {PASS_FLOOR}"


def test_expected_values_off_by_their_own_rounding_are_judged_by_the_exact_ones(ctx):
    """A float32 case whose expected values lie from the exact ones (the reference evaluator
    in float64) by rounding only passes when mnrt's outputs match the exact ones; expected
    values further off still make a mismatch wrong."""
    from types import SimpleNamespace

    from onnx import TensorProto, helper

    x = np.array([[1.0, 1e-3], [3.0, -2.0]], np.float32)
    node = helper.make_node("Mul", ["x", "x"], ["y"])
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in "xy"]
    model = helper.make_model(helper.make_graph([node], "t", info[:1], info[1:]))
    exact = x.astype(np.float64) ** 2
    for nudge, verdict in ((4e-6, "pass"), (1e-3, "wrong")):
        want = (exact + np.array([[0, nudge], [0, 0]])).astype(np.float32)  # beyond atol 1e-7
        case = SimpleNamespace(name="test_mul_nudged", model=model, rtol=1e-3, atol=1e-7,
                               data_sets=[([x], [want])])  # fmt: skip
        assert onnx_suite.run_mnrt(case, ctx).verdict == verdict
