"""einsum against numpy's einsum in float64 and exactly on int64, over the ONNX Einsum
node cases' equations and more, and its shape rules."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import infer, operand, run, spec

from mnrt.errors import DTypeError, KernelAttributeError, ShapeError

# (equation, operand shapes): ONNX's node cases first, then diagonals and '...'.
CASES = [
    ("...ii ->...i", [(3, 5, 5)]),
    ("bij, bjk -> bik", [(5, 2, 3), (5, 3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("ij->", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ii", [(4, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bii->b", [(2, 3, 3)]),
]


@pytest.mark.parametrize("equation,shapes", CASES)
def test_einsum_matches_numpy(equation, shapes):
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(s) for s in shapes]
    got = run("einsum", *(operand(x, "double") for x in xs), equation=equation)
    want = np.einsum(equation, *xs)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    ints = [rng.integers(-(2**20), 2**20, s) for s in shapes]
    got_int = run("einsum", *(operand(x, "int64") for x in ints), equation=equation)
    np.testing.assert_array_equal(got_int, np.einsum(equation, *ints))


def test_einsum_half_accumulates_in_float32():
    x = np.full((1, 4096), 1.0, np.float32)
    got = run("einsum", operand(x, "half"), operand(x.T, "half"), equation="ij,jk->ik")
    assert got.tolist() == [[4096.0]]  # a half accumulator would stall at 2048 + 2 * ...


@pytest.mark.parametrize(
    "equation,specs,error,match",
    [
        ("ij,jk->ik", [spec((2, 3)), spec((4, 5))], ShapeError, "label 'j'"),
        ("ij->ik", [spec((2, 3))], KernelAttributeError, "output label"),
        ("ij", [spec((2, 3, 4))], KernelAttributeError, "rank"),
        ("ij,jk", [spec((2, 3))], KernelAttributeError, "operand"),
        ("i1->i", [spec((2, 3))], KernelAttributeError, "letters"),
        ("...i->i", [spec((2, 3))], KernelAttributeError, "'...'"),
    ],
)
def test_einsum_refuses_bad_equations(equation, specs, error, match):
    with pytest.raises(error, match=match):
        infer("einsum", *specs, equation=equation)


def test_einsum_refuses_bool_and_mixed_dtypes():
    with pytest.raises(DTypeError, match="einsum"):
        infer("einsum", spec((2,), "bool"), equation="i")
    with pytest.raises(DTypeError, match="einsum"):
        infer("einsum", spec((2,)), spec((2,), "double"), equation="i,i")
