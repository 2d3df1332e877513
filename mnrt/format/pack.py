"""Packing the command list into a FlatBuffer, fast enough for end_capture.

Identical commands (a program enqueued again on the same buffers, a trace replayed again)
are packed once and shared: FlatBuffers lets many vector entries point at one table, so a
long loop costs one table, not one per iteration.
"""

from __future__ import annotations

from collections.abc import Sequence

import flatbuffers
import numpy as np

from .fb.Command import CommandT


def _key(cmd: CommandT) -> tuple | None:
    """A hashable identity of a command with only scalar and scalar-list fields, else None."""
    body = cmd.cmd
    parts: list = [cmd.cmdType]
    for value in vars(body).values():
        if isinstance(value, float) and value != value:
            parts.append("nan")  # NaN never equals itself; equal tables must share a key
        elif isinstance(value, (int, float, bool, str, bytes)) or value is None:
            parts.append(value)
        elif isinstance(value, (list, tuple, np.ndarray)):
            parts.append(tuple(int(v) for v in value))
        else:
            return None
    return tuple(parts)


def pack_commands(b: flatbuffers.Builder, commands: Sequence[CommandT]) -> int:
    """Pack every command; return the offset of the commands vector."""
    packed: dict[tuple, int] = {}
    offsets = []
    for cmd in commands:
        key = _key(cmd)
        off = packed.get(key) if key is not None else None
        if off is None:
            off = cmd.Pack(b)
            if key is not None:
                packed[key] = off
        offsets.append(off)
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()
