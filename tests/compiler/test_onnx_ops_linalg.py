"""The Einsum and Det converters. Einsum: products of two float operands become a batched
gemm (or a broadcasting mul when nothing is summed), every other equation the device's
einsum kernel; results against ONNX's reference evaluator. Det: elimination with pivoting,
against numpy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx_one_node import check, one_node_model

import mnrt

RNG = np.random.default_rng(11)

# equation, operand shapes, the kernels the compile runs (in order)
CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)], ["gemm"]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], ["gemm"]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)], ["gemm"]),  # trans_b
    ("bqhd,bkhd->bhqk", [(2, 4, 3, 8), (2, 5, 3, 8)], ["transpose", "transpose", "gemm"]),
    ("ij,kj", [(3, 4), (5, 4)], ["gemm"]),  # implicit output: ik
    ("ji,jk->ik", [(4, 3), (4, 5)], ["gemm"]),  # trans_a
    ("ij,jk->ki", [(3, 4), (4, 5)], ["gemm", "transpose"]),
    ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)], ["reshape", "reshape", "gemm"]),  # j, k summed
    ("ijk,kjl->il", [(2, 3, 4), (4, 3, 5)], ["reshape", "transpose", "reshape", "gemm"]),
    ("bchw,c->bhw", [(2, 3, 4, 5), (3,)], ["transpose", "reshape", "reshape", "gemm", "reshape"]),
    ("ik,jkl->ij", [(3, 4), (5, 4, 6)], ["sum", "gemm"]),  # l summed first
    ("i,i->", [(6,), (6,)], ["reshape", "reshape", "gemm", "reshape"]),  # a dot product
    ("i,j->ij", [(3,), (4,)], ["reshape", "reshape", "mul"]),  # outer product
    ("ij,ij->ij", [(3, 4), (3, 4)], ["reshape", "reshape", "mul", "reshape"]),
]


def _feeds(shapes, dtype=np.float32):
    return {f"x{i}": RNG.standard_normal(s).astype(dtype) for i, s in enumerate(shapes)}


@pytest.mark.parametrize(("equation", "shapes", "kernels"), CASES, ids=[c[0] for c in CASES])
def test_a_product_of_two_operands_runs_on_the_matrix_unit(ctx, equation, shapes, kernels):
    feeds = _feeds(shapes)
    model = one_node_model("Einsum", feeds, ["y"], equation=equation)
    check(ctx, model, feeds, rtol=1e-5, atol=1e-5)
    compiled = ctx.compile(model, feeds, options={"float_dtype": "float", "option_json": "O0"})
    assert [k.op for k in compiled.lowered.program.kernels] == kernels


@pytest.mark.parametrize(
    ("equation", "shapes", "dtype"),
    [
        ("ii->i", [(4, 4)], np.float32),  # a diagonal
        ("bii,bij->bj", [(2, 3, 3), (2, 3, 4)], np.float32),
        ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)], np.float32),  # '...' broadcasts
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], np.float32),
        ("ij->ji", [(2, 3)], np.float32),
        ("ij,jk->ik", [(3, 4), (4, 5)], np.int64),  # integers multiply exactly
    ],
)
def test_other_equations_run_as_the_einsum_kernel(ctx, equation, shapes, dtype):
    feeds = {k: (v * 4).astype(dtype) for k, v in _feeds(shapes).items()}
    model = one_node_model("Einsum", feeds, ["y"], equation=equation)
    check(ctx, model, feeds, rtol=1e-5, atol=1e-5)
    compiled = ctx.compile(model, feeds, options={"float_dtype": "float", "option_json": "O0"})
    assert [k.op for k in compiled.lowered.program.kernels] == ["einsum"]


def test_the_lowered_product_is_priced_as_matmul_and_below_the_einsum_kernel(ctx):
    """The reason for the lowering: a product on the matrix unit. The same product written
    with '...' runs as the einsum kernel, priced on the vector units."""
    feeds = _feeds([(2, 512, 512), (2, 512, 512)])
    options = {"float_dtype": "float", "option_json": "O3"}
    models = [
        one_node_model("Einsum", feeds, ["y"], equation="bij,bjk->bik"),
        one_node_model("MatMul", feeds, ["y"]),
        one_node_model("Einsum", feeds, ["y"], equation="...ij,...jk->...ik"),
    ]
    compiled = [ctx.compile(m, feeds, options=options) for m in models]
    assert [k.op for k in compiled[2].lowered.program.kernels] == ["einsum"]
    results = [c(feeds)["y"].cpu() for c in compiled]
    for other in results[1:]:
        np.testing.assert_allclose(results[0], other, rtol=1e-4, atol=1e-4)
    time_s = [c.report([])["modelled"]["time_s"] for c in compiled]
    assert time_s[0] == time_s[1] < time_s[2] / 2, time_s


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("ij,jk->ik", [(3, 4), (5, 6)], "label 'j' is 4 long in one place and 5"),
        ("ij,jk->iz", [(3, 4), (4, 5)], "names an output label twice or one no input has"),
        ("ijk,jk->ik", [(3, 4), (4, 5)], "does not match operand 0 of rank 2"),
    ],
)
def test_a_wrong_equation_is_the_kernels_error(ctx, equation, shapes, message):
    feeds = _feeds(shapes)
    model = one_node_model("Einsum", feeds, ["y"], equation=equation)
    with pytest.raises(mnrt.MnrtError, match=message):
        ctx.compile(model, feeds, options={"float_dtype": "float"})


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 4, 5, 5), (6, 8, 8)])
def test_det_matches_numpy(ctx, shape):
    """Det by elimination with partial pivoting on the device, against numpy's LU: matrices
    that need a row swap at the first step (a zero in the corner), and singular ones."""
    from onnx_one_node import run

    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1, *shape[-2:])
    if shape[-1] > 1:
        flat[0, 0, 0] = 0.0  # the first pivot comes from another row
        flat[-1, 1] = flat[-1, 0] * 2  # singular: two proportional rows
    model = one_node_model("Det", {"x": x}, ["y"], opset=22)
    (got,) = run(ctx, model, {"x": x})
    want = np.linalg.det(x.astype(np.float64))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_det_of_matrices_it_cannot_unroll_is_refused():
    from mnrt.compiler.onnx import UnsupportedModelError, from_onnx

    x = np.zeros((40, 40), np.float32)
    with pytest.raises(UnsupportedModelError, match="40 x 40 matrices"):
        from_onnx(one_node_model("Det", {"x": x}, ["y"], opset=22))
