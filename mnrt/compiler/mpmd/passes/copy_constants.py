"""copy-constants: a constant a fragment computes and another device reads through a
transfer is computed again by its reader instead.

A node is constant when everything it reads is a parameter or another constant node's
result. For a transfer of such a value, each fragment reading the transfer's result gets
a copy of the nodes that compute it (at its start, names suffixed) and reads that copy:
nothing crosses the link, and the constant sits with its users. Like Shardy's pass it does
not clean up: fragment-dce removes the transfer once nothing reads it.
"""

from __future__ import annotations

from ...ir import PARAM, Node, Value
from ..ir import Fragment, MpmdProgram, Transfer
from ..rewrite import refresh

NAME = "copy-constants"


def _constant_chains(fragment: Fragment, values: dict[str, Value]) -> dict[str, list[Node]]:
    """Value -> the fragment's nodes (in order) that compute it, for its constant values."""
    chains: dict[str, list[Node]] = {}
    for node in fragment.nodes:
        if all(values[n].role == PARAM or n in chains for n in node.inputs):
            needed: dict[int, Node] = {}
            for name in node.inputs:
                needed.update((id(n), n) for n in chains.get(name, ()))
            chain = [*needed.values(), node]
            order = {id(n): i for i, n in enumerate(fragment.nodes)}
            chain.sort(key=lambda n: order[id(n)])
            chains.update(dict.fromkeys(node.outputs, chain))
    return chains


def run(program: MpmdProgram) -> MpmdProgram:
    p = program.copy()
    chains: dict[str, list[Node]] = {}
    for op in p.ops:
        if isinstance(op, Fragment):
            chains.update(_constant_chains(op, p.values))
    for t in [op for op in p.ops if isinstance(op, Transfer) and op.source in chains]:
        for reader in [op for op in p.ops if isinstance(op, Fragment) and t.result in op.inputs]:
            renamed: dict[str, str] = {}
            copies = []
            for node in chains[t.source]:
                outs = []
                for name in node.outputs:
                    renamed[name] = p.fresh(f"{name}.{reader.name}.")
                    p.values[renamed[name]] = Value(
                        renamed[name], p.values[name].shape, p.values[name].dtype
                    )
                    outs.append(renamed[name])
                ins = [renamed.get(n, n) for n in node.inputs]
                copies.append(Node(node.op, ins, outs, dict(node.attrs), node.name))
            reader.nodes[:0] = copies
            for node in reader.nodes[len(copies) :]:
                node.inputs = [renamed[t.source] if n == t.result else n for n in node.inputs]
    refresh(p)
    return p
