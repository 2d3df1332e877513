"""A binary's inputs and outputs: the buffers a runner's caller fills and gets back.

Captures since format 1.1 list them by buffer id (`LightBinary.inputs`/`outputs` in the
schema): an input is a buffer a host call wrote (not a state snapshot of one made before
capture began), an output one the host read back or checked against a golden. Older
binaries have no lists; `derive` makes them from the commands, where a snapshot cannot be
told from a host write, so there every written buffer counts as an input.

Name, shape and dtype are the buffer's own (its CreateBuffer), recorded once. The name a
runner uses (`mnrt run --input NAME=x.npy`) is the buffer's name made unique among the
binary's inputs and outputs by `Namer`, taken in the order the buffers were created,
so one buffer has one name whether it is an input, an output or both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .fb.CommandUnion import CommandUnion as U
from .text import decoded


@dataclass(frozen=True)
class IoBuffer:
    """One input or output: its unique name, the buffer's id, shape and dtype code."""

    name: str
    buffer_id: int
    shape: tuple[int, ...]
    dtype: int


class Namer:
    """Unique names: `name(base)` gives `base` the first time, then `base#2`, `base#3`, ...,
    skipping any name given before. Each base remembers where it got to, so naming the
    same base n times costs O(n), not O(n**2)."""

    def __init__(self) -> None:
        self.given: set[str] = set()
        self._next: dict[str, int] = {}

    def __call__(self, base: str) -> str:
        n = self._next.get(base, 1)
        name = base if n == 1 else f"{base}#{n}"
        while name in self.given:
            n += 1
            name = f"{base}#{n}"
        self._next[base] = n + 1
        self.given.add(name)
        return name


def derive(commands: Sequence[Any]) -> tuple[list[int], list[int]]:
    """(input ids, output ids) of a command list (object-API `CommandT`s): buffers written by
    a WriteBuffer, and buffers read by a ReadBuffer or checked by a GoldenCheck, each once,
    in the order of their first such command. (A capture notes its own lists as it builds
    the binary, where it knows which writes are snapshots: capture/build.py.)"""
    written: dict[int, None] = {}  # ordered sets
    read: dict[int, None] = {}
    for command in commands:
        kind, cmd = command.cmdType, command.cmd
        if cmd is None:
            continue
        if kind == U.WriteBuffer:
            written[int(cmd.bufferId)] = None
        elif kind in (U.ReadBuffer, U.GoldenCheck):
            read[int(cmd.bufferId)] = None
    return list(written), list(read)


def describe(
    commands: Sequence[Any], inputs: Sequence[int], outputs: Sequence[int]
) -> tuple[list[IoBuffer], list[IoBuffer]]:
    """The inputs and outputs given by buffer id, with their names, shapes and dtypes from
    the commands that create those buffers. An id no command creates is left out (the
    replay validator reports it)."""
    wanted = set(inputs) | set(outputs)
    entries: dict[int, IoBuffer] = {}
    name = Namer()
    for command in commands:
        cmd = command.cmd
        if command.cmdType != U.CreateBuffer or cmd is None or cmd.desc is None:
            continue
        gid = int(cmd.bufferId)
        if gid not in wanted or gid in entries:
            continue
        d = cmd.desc
        shape = () if d.shape is None else tuple(int(s) for s in d.shape)
        entries[gid] = IoBuffer(name(decoded(d.name) or f"buffer{gid}"), gid, shape, int(d.dtype))
    return (
        [entries[g] for g in inputs if g in entries],
        [entries[g] for g in outputs if g in entries],
    )
