"""The MPMD IR (the Shardy MPMD model, in mnrt's terms).

A program is one function over one microbatch, in program order, made of
- *fragments*: a list of graph nodes that run together on one device (the Shardy "mesh")
  as one pipeline stage. A fragment made from the user's `stage_assignment` is a *user*
  fragment (its `origin` names the prefixes it came from); one the compiler made for nodes
  nobody assigned is *inferred* (empty origin);
- *transfers*: a value of one device made available on another (a device-to-device copy).

Values are named (SSA: each defined once, by a function input, a node or a transfer) and
keep their `ir.Value` (shape, dtype, role); parameters are not transferred: every fragment
reads its own device's copy. A fragment lists its operands (values it reads from outside)
and its results (values later ops or the function's return read). `verify` checks all of
that, so every pass test checks its output is a well-formed program.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

from ...errors import InvalidArgumentError
from ..ir import INPUT, PARAM, Node, Value


class MpmdError(InvalidArgumentError):
    """An MPMD program or option is malformed: an assignment that sends values backwards,
    a stage that cannot be one fragment, an IR text that does not parse."""


@dataclass
class Fragment:
    """Nodes that run together on `device` as stage `stage`."""

    name: str
    stage: int
    device: int
    nodes: list[Node]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    origin: tuple[str, ...] = ()

    @property
    def ops(self) -> list[Node]:
        return self.nodes

    @property
    def inferred(self) -> bool:
        return not self.origin

    def defines(self) -> list[str]:
        return [o for node in self.nodes for o in node.outputs]

    def reads(self) -> list[str]:
        """Values its nodes read that none of them defines, in first-use order."""
        defined: set[str] = set()
        seen: dict[str, None] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name not in defined:
                    seen.setdefault(name, None)
            defined.update(node.outputs)
        return list(seen)


@dataclass
class Transfer:
    """`result` on device `dst` holds what `source` holds on device `src`."""

    name: str
    source: str
    result: str
    src: int
    dst: int


Op = Fragment | Transfer


@dataclass
class MpmdProgram:
    name: str
    values: dict[str, Value]
    inputs: list[str]
    outputs: list[str]
    ops: list[Op]
    homes: dict[str, int]  # function input -> the device it is written to

    def copy(self) -> MpmdProgram:
        """A copy a pass may change: its own ops, nodes and value records (parameter data
        is shared, never changed in place)."""
        ops: list[Op] = []
        for op in self.ops:
            if isinstance(op, Fragment):
                nodes = [
                    Node(n.op, list(n.inputs), list(n.outputs), copy.deepcopy(n.attrs), n.name)
                    for n in op.nodes
                ]
                ops.append(
                    Fragment(
                        op.name,
                        op.stage,
                        op.device,
                        nodes,
                        list(op.inputs),
                        list(op.outputs),
                        op.origin,
                    )
                )
            else:
                ops.append(dataclasses.replace(op))
        return MpmdProgram(
            self.name,
            {k: dataclasses.replace(v) for k, v in self.values.items()},
            list(self.inputs),
            list(self.outputs),
            ops,
            dict(self.homes),
        )

    @property
    def fragments(self) -> list[Fragment]:
        return [op for op in self.ops if isinstance(op, Fragment)]

    @property
    def transfers(self) -> list[Transfer]:
        return [op for op in self.ops if isinstance(op, Transfer)]

    def device_of(self) -> dict[str, int]:
        """Value -> the device it lives on (parameters live wherever they are read)."""
        where = dict(self.homes)
        for op in self.ops:
            if isinstance(op, Fragment):
                where.update(dict.fromkeys(op.defines(), op.device))
            else:
                where[op.result] = op.dst
        return where

    def users(self) -> dict[str, list[int]]:
        """Value -> indices of the ops that read it (a fragment through its operands)."""
        users: dict[str, list[int]] = {}
        for i, op in enumerate(self.ops):
            for name in op.inputs if isinstance(op, Fragment) else [op.source]:
                users.setdefault(name, []).append(i)
        return users

    def producer(self) -> dict[str, int]:
        """Value -> index of the op that defines it."""
        out: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            for name in op.defines() if isinstance(op, Fragment) else [op.result]:
                out[name] = i
        return out

    def fresh(self, stem: str) -> str:
        """A value or op name not used yet."""
        taken = set(self.values) | {op.name for op in self.ops}
        i = 0
        while f"{stem}{i}" in taken:
            i += 1
        return f"{stem}{i}"

    def verify(self) -> None:
        """Raise MpmdError unless the program is well formed (see the module docstring)."""
        where: dict[str, int] = {}  # value others may read -> its device
        defined: set[str] = set()  # every value defined so far, exported or not
        for name in self.inputs:
            value = self.values.get(name)
            if value is None or value.role != INPUT or name not in self.homes:
                raise MpmdError(f"{self.name}: input %{name} is not an input with a device")
            where[name] = self.homes[name]
        names: set[str] = set()
        for op in self.ops:
            if op.name in names:
                raise MpmdError(f"{self.name}: two ops are named @{op.name}")
            names.add(op.name)
            if isinstance(op, Transfer):
                self._verify_transfer(op, where, defined)
            else:
                self._verify_fragment(op, where, defined)
        for name in self.outputs:
            if name not in where:
                raise MpmdError(f"{self.name}: returned %{name} is never defined")

    def _verify_transfer(self, op: Transfer, where: dict[str, int], defined: set[str]) -> None:
        if op.source not in where:
            raise MpmdError(
                f"transfer @{op.name}: %{op.source} is not defined before it (or not a "
                "result of the fragment that makes it)"
            )
        if where[op.source] != op.src:
            raise MpmdError(f"transfer @{op.name}: %{op.source} is not on device {op.src}")
        if op.result in where or op.result in defined or op.result not in self.values:
            raise MpmdError(f"transfer @{op.name}: %{op.result} is defined twice or untyped")
        if op.src == op.dst:
            raise MpmdError(f"transfer @{op.name}: moves %{op.source} to its own device")
        defined.add(op.result)
        where[op.result] = op.dst

    def _verify_fragment(self, op: Fragment, where: dict[str, int], defined: set[str]) -> None:
        what = f"fragment @{op.name} (stage {op.stage}, device {op.device})"
        if not op.nodes:
            raise MpmdError(f"{what} has no nodes")
        for name in op.inputs:
            if name not in where:
                raise MpmdError(f"{what}: operand %{name} is not defined before it")
            if where[name] != op.device:
                raise MpmdError(f"{what}: operand %{name} lives on device {where[name]}")
        operands = set(op.inputs)
        for name in op.reads():
            value = self.values.get(name)
            if name not in operands and (value is None or value.role != PARAM):
                raise MpmdError(f"{what}: reads %{name}, which is not among its operands")
        own = op.defines()
        for name in own:
            if name in where or name in defined or name not in self.values:
                raise MpmdError(f"{what}: %{name} is defined twice or untyped")
        defined.update(own)
        for name in op.outputs:
            if name not in own and name not in operands:
                raise MpmdError(f"{what}: result %{name} is not defined in it")
        where.update(dict.fromkeys(op.outputs, op.device))
