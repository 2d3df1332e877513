"""Two programs' kernels lined up for `mnrt diff` (diff.py): first the kernels that read
the same weight, then, between those, the kernels by op, as a text diff lines up lines.

Two compiles of one model at other presets name their intermediate values differently,
fuse kernels away and hold a convolution in a chain; a weight keeps its name, so the
kernels that read it are one layer whatever each compile made of it.
"""

from __future__ import annotations

import bisect
import difflib


def _operands(kernel: dict) -> list[str]:
    """The names a kernel reads besides its first input: a conv's or gemm's weight and
    bias, a chain's parameters, an add's second operand."""
    inputs = kernel.get("inputs")
    return [n for n in inputs[1:] if isinstance(n, str)] if isinstance(inputs, list) else []


def _anchors(ka: list[dict], kb: list[dict]) -> list[tuple[int, int]]:
    """Kernels of the two programs that are one layer: each reads a name (its weight, say)
    that no other kernel of its program reads besides its first input, and the other
    program's one kernel reading it is its partner; the longest run of such pairs in the
    same order on both sides. A conv of one compile and the chain that holds it in another
    pair up so, where by op they would not."""

    def once(kernels: list[dict]) -> dict[str, int]:
        seen: dict[str, int] = {}
        for i, k in enumerate(kernels):
            for name in set(_operands(k)):
                seen[name] = -1 if name in seen else i
        return {n: i for n, i in seen.items() if i >= 0}

    in_a, in_b = once(ka), once(kb)
    candidates = sorted({(i, in_b[n]) for n, i in in_a.items() if n in in_b})
    used_a, used_b, pairs = set(), set(), []
    for i, j in candidates:
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            pairs.append((i, j))
    # The longest chain increasing in both (patience sorting over j, pairs sorted by i).
    tails: list[int] = []  # the pair ending the best chain of each length
    ends: list[int] = []  # its j
    back: list[int] = []
    for k, (_, j) in enumerate(pairs):
        at = bisect.bisect_left(ends, j)
        back.append(tails[at - 1] if at else -1)
        tails[at : at + 1], ends[at : at + 1] = [k], [j]
    chain, k = [], tails[-1] if tails else -1
    while k >= 0:
        chain.append(pairs[k])
        k = back[k]
    return chain[::-1]


def kernel_opcodes(ka: list[dict], kb: list[dict]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes for two kernel lists: the anchored pairs (see `_anchors`) as
    'equal' one-kernel stretches, and between them the kernels aligned by op."""
    out = []
    ops_a, ops_b = [str(k.get("op")) for k in ka], [str(k.get("op")) for k in kb]
    at_a = at_b = 0
    for i, j in [*_anchors(ka, kb), (len(ka), len(kb))]:
        matcher = difflib.SequenceMatcher(None, ops_a[at_a:i], ops_b[at_b:j], False)
        out += [
            (tag, i1 + at_a, i2 + at_a, j1 + at_b, j2 + at_b)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        ]
        if i < len(ka):
            out.append(("equal", i, i + 1, j, j + 1))
        at_a, at_b = i + 1, j + 1
    return out
