"""merge-transfers: small transfers between the same two fragments become one.

Transfers of one dtype from the same producer fragment to the same (single) consumer
fragment, each of fewer than THRESHOLD elements, are merged: the producer flattens and
concatenates them, one transfer moves the concatenation, and the consumer slices and
reshapes each back. Every copy pays the link's latency, so several small ones cost more
than their bytes say.
"""

from __future__ import annotations

import math

from ....device.kernels import lookup
from ...ir import Node, Value
from ..ir import Fragment, MpmdProgram, Transfer
from ..rewrite import drop_unused_values, refresh, replace_uses

NAME = "merge-transfers"
THRESHOLD = 1 << 16  # elements


def _node(op: str, ins: list[str], outs: list[str], name: str, **attrs: object) -> Node:
    return Node(op, ins, outs, lookup(op).check_attrs(attrs), name)


def _groups(p: MpmdProgram) -> list[list[Transfer]]:
    producer = p.producer()
    users = p.users()
    groups: dict[tuple, list[Transfer]] = {}
    for t in p.transfers:
        readers = users.get(t.result, [])
        source = p.values[t.source]
        if (
            t.source not in producer
            or not isinstance(p.ops[producer[t.source]], Fragment)
            or len(readers) != 1
            or not isinstance(p.ops[readers[0]], Fragment)
            or t.result in p.outputs
            or math.prod(source.shape) >= THRESHOLD
        ):
            continue
        key = (producer[t.source], readers[0], t.src, t.dst, source.dtype)
        groups.setdefault(key, []).append(t)
    return [g for g in groups.values() if len(g) > 1]


def _merge(p: MpmdProgram, group: list[Transfer]) -> None:
    producer = p.ops[p.producer()[group[0].source]]
    consumer = p.ops[p.users()[group[0].result][0]]
    dtype = p.values[group[0].source].dtype
    sizes = [math.prod(p.values[t.source].shape) for t in group]
    flats = []
    for t, n in zip(group, sizes):
        flat = p.fresh(f"{t.source}.flat.")
        p.values[flat] = Value(flat, (n,), dtype)
        producer.nodes.append(_node("reshape", [t.source], [flat], f"{flat}", shape=(n,)))
        flats.append(flat)
    packed = p.fresh("packed.")
    p.values[packed] = Value(packed, (sum(sizes),), dtype)
    producer.nodes.append(_node("concat", flats, [packed], packed, axis=0))
    moved = p.fresh(f"{packed}.to{group[0].dst}.")
    p.values[moved] = Value(moved, (sum(sizes),), dtype)
    at = p.ops.index(group[0])
    merged = Transfer(p.fresh("t"), packed, moved, group[0].src, group[0].dst)
    p.ops = [op for op in p.ops if op not in group]
    p.ops.insert(at, merged)
    unpacked = []
    offset = 0
    for t, n in zip(group, sizes):
        part = p.fresh(f"{t.result}.part.")
        p.values[part] = Value(part, (n,), dtype)
        unpacked.append(_node("slice", [moved], [part], part, starts=(offset,), ends=(offset + n,)))
        whole = p.fresh(f"{t.result}.")
        p.values[whole] = Value(whole, p.values[t.result].shape, dtype)
        unpacked.append(_node("reshape", [part], [whole], whole, shape=p.values[t.result].shape))
        for node in consumer.nodes:
            node.inputs = [whole if x == t.result else x for x in node.inputs]
        replace_uses(p, t.result, whole)
        offset += n
    consumer.nodes[:0] = unpacked


def run(program: MpmdProgram) -> MpmdProgram:
    p = program.copy()
    for group in _groups(p):
        _merge(p, group)
    refresh(p)
    drop_unused_values(p)
    return p
