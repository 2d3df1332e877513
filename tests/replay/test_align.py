"""Kernels of two programs lined up for `mnrt diff`: by the weights they read, then by op."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from mnrt.replay.align import kernel_opcodes


def _k(op: str, *inputs: str) -> dict:
    return {"op": op, "inputs": list(inputs), "outputs": ["y"]}


def _pairs(ka: list[dict], kb: list[dict]) -> list[tuple[int, int]]:
    return [
        p
        for tag, i1, i2, j1, j2 in kernel_opcodes(ka, kb)
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1)
        for p in zip(range(i1, i2), range(j1, j2))
    ]


def test_a_conv_pairs_with_the_chain_that_reads_its_weight():
    """By op alone the first conv2d would pair with the only conv2d of the other side,
    which reads the second layer's weight."""
    ka = [_k("cast", "x"), _k("conv2d", "x_h", "w1", "b1"), _k("relu", "c1"),
          _k("conv2d", "r1", "w2", "b2"), _k("relu", "c2"), _k("gemm", "r2", "fc")]  # fmt: skip
    kb = [_k("chain", "x", "w1", "b1"), _k("conv2d", "r1", "w2", "b2"), _k("gemm", "r2", "fc")]
    assert _pairs(ka, kb) == [(1, 0), (3, 1), (5, 2)]


def test_a_name_two_kernels_read_anchors_nothing_and_crossed_pairs_keep_their_order():
    ka = [_k("add", "x", "s"), _k("mul", "y", "w1"), _k("mul", "z", "w2"), _k("add", "q", "s")]
    kb = [_k("mul", "z", "w2"), _k("mul", "y", "w1")]
    pairs = _pairs(ka, kb)
    assert len(pairs) == 2 and all(a < c and b < d for (a, b), (c, d) in pairwise(pairs))
    assert (1, 1) in pairs or (2, 0) in pairs  # one of the crossed layers, kept in order


_kernels = st.lists(
    st.builds(
        _k,
        st.sampled_from(["conv2d", "gemm", "relu", "chain", "cast"]),
        *[st.sampled_from(["x", "w1", "w2", "w3", "b1", "s"])] * 3,
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_kernels, _kernels)
def test_the_opcodes_cover_both_programs_once_in_order(ka, kb):
    at_a = at_b = 0
    for _, i1, i2, j1, j2 in kernel_opcodes(ka, kb):
        assert (i1, j1) == (at_a, at_b) and i2 >= i1 and j2 >= j1
        at_a, at_b = i2, j2
    assert (at_a, at_b) == (len(ka), len(kb))
