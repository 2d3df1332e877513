"""Device traces: programs recorded on a queue once and replayed many times, as in
tt-metal's trace capture and CUDA Graphs. A trace holds its commands in full."""

from __future__ import annotations

from dataclasses import dataclass, field

from .commands import RunProgram


@dataclass
class Trace:
    id: int
    queue_index: int
    commands: list[RunProgram] = field(default_factory=list)
    complete: bool = False  # set by end_trace_capture; an open trace cannot be replayed
