"""Replay profiles as Perfetto traces: Chrome trace-event JSON, which ui.perfetto.dev and
chrome://tracing open as they are.

Two clocks meet in one trace, so each gets its own tracks:

- the host: one slice per loop, the replayed commands inside it, and the golden checks;
- one process per device the binary captured, and per queue two tracks: what the emulator
  did, on host wall time (each queue command as its worker ran it, a program's kernels
  nested inside, an arrow from the command that enqueued it); and what the modelled
  MN-Core 2 boards would take, each command where the multi-device timeline
  (mnrt.host.timeline) places it from the loop's start, given its queue, the events it
  waits on, the device's PE array and the link;
- on the modelled tracks, an arrow for each copy between devices, from the end that sends
  to the end that receives (a copy enqueued on one device also shows on the other
  device's link track), and one from each event's record to each wait on it;
- a counter per device: DRAM in use after each allocation and free.

Events are built as each loop ends, so a profile keeps no buffers or arrays alive.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..format.files import write_atomically
from ..format.strict_json import json_value
from ..host.commands import FAILED, RunProgram
from ..host.device import MAX_QUEUES
from ..host.timeline import schedule
from .executor import COMMAND_NAMES
from .modelled import spans as span_list
from .plan import BUFFER, DEVICE, PROGRAM, QUEUE, Plan
from .report import check_dict

if TYPE_CHECKING:
    from ..host import Buffer, CommandQueue
    from ..host.commands import Command
    from ..host.golden import Check
    from ..host.timeline import Span
    from .executor import Executor

HOST_PID, HOST_TID = 0, 0
# A device's link tracks, after its queues' (two tracks a queue): the modelled copies another
# device's queue ran into it and out of it (each direction of its link runs one at a time).
LINK_TIDS = {"in": 2 * MAX_QUEUES + 1, "out": 2 * MAX_QUEUES + 2}


def _describe(buf: Buffer) -> str:
    return f"{buf.name} {buf.dtype.name}{list(buf.shape)}"


def _modelled_args(m: Any) -> dict[str, Any]:
    if m is None:
        return {}
    return {
        "modelled_us": m.time_s * 1e6,
        "energy_uj": m.energy_j * 1e6,
        "flops": m.flops,
        "dram_bytes": m.dram_bytes,
        "bound": m.bound,
    }


# Loops traced in full: a trace holds tens of kilobytes a loop, and a thousand loops are
# more than a trace viewer shows usefully. Later loops that pass are counted only; one that
# fails is always traced.
MAX_TRACED_LOOPS = 1000


class Profile:
    """Trace events of every loop of one replay; `to_trace()` for the JSON, `save()` to write
    it. Times are microseconds from when the profile began."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.origin = time.perf_counter()
        self.loops = 0
        self.untraced = 0  # passing loops past MAX_TRACED_LOOPS
        self.meta: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self._pids: dict[int, int] = {}  # device id -> trace process id
        # queue id -> (process, wall-time thread, modelled-time thread)
        self._tids: dict[int, tuple[int, int, int]] = {}
        self._link_tracks: set[tuple[int, int]] = set()  # (pid, tid) of named link tracks
        self._flows = itertools.count(1)
        self._name(HOST_PID, None, "mnrt replay (host)")
        self._name(HOST_PID, HOST_TID, "replayed commands")

    def _us(self, t: float) -> float:
        return round((t - self.origin) * 1e6, 3)

    def _name(self, pid: int, tid: int | None, name: str) -> None:
        kind = "process_name" if tid is None else "thread_name"
        event = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
        sort = {"ph": "M", "name": kind.replace("name", "sort_index"), "pid": pid}
        if tid is not None:
            event["tid"] = sort["tid"] = tid
        sort["args"] = {"sort_index": pid if tid is None else tid}
        self.meta += [event, sort]

    def _slice(
        self, name: str, pid: int, tid: int, start: float, end: float, args: dict[str, Any]
    ) -> None:
        """A complete event from `start` to `end` (microseconds). Both ends are rounded to
        the nanosecond, so a slice inside another still ends inside it once rounded, as
        the trace viewers' nesting of slices on one thread needs."""
        ts = round(start, 3)
        dur = round(round(end, 3) - ts, 3)
        self.events.append(
            {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
        )

    def _span(self, name: str, pid: int, tid: int, t0: float, t1: float, args: dict) -> None:
        """A slice between two perf_counter() readings."""
        self._slice(name, pid, tid, (t0 - self.origin) * 1e6, (t1 - self.origin) * 1e6, args)

    # --- one loop -----------------------------------------------------------------------
    def add_loop(
        self,
        executor: Executor,
        start: float,
        end: float,
        checks: list[Check],
        checked: float,
        error: str | None = None,
    ) -> None:
        """Record one loop: `start`/`end` bound its commands, the golden checks ran from
        `end` to `checked`. A loop stopped by `error` is recorded up to the failure. Call
        before the executor's devices are closed; the modelled tracks need an executor
        that kept its queue commands (`Executor(..., timeline=True)`)."""
        self.loops += 1
        if self.loops > MAX_TRACED_LOOPS and error is None and all(c.passed for c in checks):
            self.untraced += 1  # a loop like the ones traced: counted, not kept
            return
        args: dict[str, Any] = {
            "wall_ms": (end - start) * 1e3,
            "passed": error is None and all(c.passed for c in checks),
        }
        if error is not None:
            args["error"] = error
        self._span(f"loop {self.loops}", HOST_PID, HOST_TID, start, checked, args)
        self._host_commands(executor)
        if error is None:
            checks_args = {c.name: check_dict(c) for c in checks}
            self._span("verify goldens", HOST_PID, HOST_TID, end, checked, checks_args)
        for device_id, dev in executor.tables[DEVICE].items():
            index = self.plan.device_index[device_id]
            pid = self._device_pid(device_id, f"device {index} ({dev.name})")
            for t, dev_id, used in executor.memory:
                if dev_id == device_id:
                    self._counter(pid, t, used)
            self._counter(pid, checked, 0)  # every device closes when its loop ends
        for queue_id, q in executor.tables[QUEUE].items():
            self._queue(queue_id, q)
        if executor.submitted is not None:
            self._timeline(executor.submitted, start)

    def _host_commands(self, executor: Executor) -> None:
        commands = self.plan.binary.commands
        for index, kind, t0, t1 in executor.spans:
            args: dict[str, Any] = {"command": index}
            cmd = commands[index].cmd
            for field, table, key in (
                ("bufferId", self.plan.buffers, BUFFER),
                ("programId", self.plan.programs, PROGRAM),
            ):
                info = table.get(getattr(cmd, field, None))
                if info is not None:
                    args[key] = info.name
            self._span(COMMAND_NAMES[kind], HOST_PID, HOST_TID, t0, t1, args)

    def _device_pid(self, device_id: int, name: str) -> int:
        pid = self._pids.get(device_id)
        if pid is None:
            pid = self._pids[device_id] = len(self._pids) + 1
            self._name(pid, None, name)
        return pid

    def _counter(self, pid: int, t: float, used: int) -> None:
        args = {"bytes": used}
        self.events.append(
            {"ph": "C", "name": "DRAM in use", "pid": pid, "ts": self._us(t), "args": args}
        )

    def _queue(self, queue_id: int, q: CommandQueue) -> None:
        """The queue's tracks, and what the emulator did on it on host wall time."""
        pid = self._pids[self.plan.queue_device[queue_id]]
        tids = self._tids.get(queue_id)
        if tids is None:
            base = 2 * sum(1 for other_pid, _, _ in self._tids.values() if other_pid == pid)
            tids = self._tids[queue_id] = (pid, base + 1, base + 2)
            index = self.plan.queue_index[queue_id]  # as captured (folding may move it)
            self._name(pid, base + 1, f"queue {index}: emulator (host wall time)")
            self._name(pid, base + 2, f"queue {index}: modelled MN-Core time")
        for cmd in q.history:
            if cmd.start_s:  # it ran (skipped commands did not)
                self._wall(cmd, pid, tids[1])

    def _wall(self, cmd: Command, pid: int, tid: int) -> None:
        args = {"queue_command": cmd.index, "status": cmd.status, **_modelled_args(cmd.modelled)}
        self._span(cmd.label, pid, tid, cmd.start_s, cmd.start_s + cmd.wall_s, args)
        if cmd.enqueued_s is not None:  # an arrow from the host command that enqueued it
            common = {"name": "enqueue", "cat": "queue", "id": next(self._flows)}
            enqueued = self._us(cmd.enqueued_s)
            self.events += [
                {"ph": "s", "pid": HOST_PID, "tid": HOST_TID, "ts": enqueued, **common},
                {
                    "ph": "f",
                    "bp": "e",
                    "pid": pid,
                    "tid": tid,
                    "ts": self._us(cmd.start_s),
                    **common,
                },
            ]
        if isinstance(cmd, RunProgram) and cmd.kernel_spans:
            spans = cmd.kernel_spans
            for i, (step, (t0, t1)) in enumerate(zip(cmd.plan.steps, spans)):
                args = self._kernel_args(i, step)
                if cmd.status == FAILED and i == len(spans) - 1:
                    args["status"] = FAILED  # the kernel the program stopped at
                self._span(step.kdef.name, pid, tid, t0, t1, args)

    # --- the modelled timeline -------------------------------------------------------------
    def _timeline(self, submitted: list[tuple[int, int, Command | None]], start: float) -> None:
        """Each queue command on its queue's modelled track where the multi-device timeline
        placed it (from the loop's start), a program's kernels inside it; a copy between
        devices also on the other end's link track, with an arrow from the end that sends
        to the end that receives; an arrow from each event's record to each wait on it."""
        spans = span_list(self.plan, submitted)
        # A rank of a distributed replay has only its own commands: a wait on another
        # rank's event starts, here, when its queue lets it.
        keys = {s.key for s in spans}
        spans = [
            s if set(s.after) <= keys else replace(s, after=tuple(k for k in s.after if k in keys))
            for s in spans
        ]
        timeline = schedule(spans)
        origin = self._us(start)
        pid_of = {self.plan.device_index[gid]: pid for gid, pid in self._pids.items()}
        at: dict[int, tuple[int, int, float]] = {}  # span key -> (pid, tid, start us)
        for span, (_, queue_id, cmd) in zip(spans, submitted):
            if cmd is not None and cmd.modelled is None:  # failed or skipped: never ran
                continue
            pid, _, tid = self._tids[queue_id]
            t0 = origin + timeline.start_s[span.key] * 1e6
            t1 = origin + timeline.end_s[span.key] * 1e6
            self._modelled(cmd, span, pid, tid, t0, t1)
            at[span.key] = (pid, tid, t0)
            if span.link is None:
                continue
            src, dst = span.link
            other = dst if span.device == src else src
            if other not in pid_of:  # another rank's device: not in this trace
                continue
            other_pid = pid_of[other]
            link_tid = self._link_tid(other_pid, "in" if other == dst else "out")
            args = {"command": span.key, "device": other, "queue_device": span.device}
            self._slice(span.name, other_pid, link_tid, t0, t1, args)
            here, there = (pid, tid, t0), (other_pid, link_tid, t0)
            self._flow("copy", *((here, there) if span.device == src else (there, here)))
        for flow in timeline.flows:
            if flow.kind == "event" and flow.from_key in at and flow.to_key in at:
                self._flow("event", at[flow.from_key], at[flow.to_key])

    def _modelled(
        self, cmd: Command | None, span: Span, pid: int, tid: int, start: float, end: float
    ) -> None:
        args = {
            "command": span.key,
            "device": span.device,
            **_modelled_args(cmd.modelled if cmd is not None else None),
            # What the timeline charged (a copy as priced for the captured devices).
            "modelled_us": span.duration_s * 1e6,
            "energy_uj": span.energy_j * 1e6,
        }
        if cmd is not None:
            args["queue_command"] = cmd.index
        self._slice(span.name, pid, tid, start, end, args)
        if isinstance(cmd, RunProgram):
            at = start
            for i, step in enumerate(cmd.plan.steps):
                # Clamped: the kernels' sum may pass the program's total by a rounding error.
                step_end = min(at + step.modelled.time_s * 1e6, end)
                self._slice(step.kdef.name, pid, tid, at, step_end, self._kernel_args(i, step))
                at = step_end

    def _link_tid(self, pid: int, direction: str) -> int:
        tid = LINK_TIDS[direction]
        if (pid, tid) not in self._link_tracks:
            self._link_tracks.add((pid, tid))
            where = "into this device" if direction == "in" else "out of this device"
            self._name(pid, tid, f"link {direction}: copies {where} (modelled)")
        return tid

    def _flow(self, cat: str, source: tuple[int, int, float], sink: tuple[int, int, float]) -> None:
        """An arrow from the slice at `source` to the one at `sink`, each (pid, tid, us)."""
        common = {"name": cat, "cat": cat, "id": next(self._flows)}
        (pid0, tid0, t0), (pid1, tid1, t1) = source, sink
        self.events += [
            {"ph": "s", "pid": pid0, "tid": tid0, "ts": round(t0, 3), **common},
            {"ph": "f", "bp": "e", "pid": pid1, "tid": tid1, "ts": round(t1, 3), **common},
        ]

    @staticmethod
    def _kernel_args(i: int, step: Any) -> dict[str, Any]:
        return {
            "kernel": i,
            "inputs": [_describe(b) for b in step.ins],
            "outputs": [_describe(b) for b in step.outs],
            "attrs": {k: json_value(v) for k, v in step.bound.attrs.items()},
            **_modelled_args(step.modelled),
        }

    # --- output -------------------------------------------------------------------------
    def to_trace(self) -> dict[str, Any]:
        """The trace as a JSON-ready dict in Chrome's trace-event format."""
        binary = self.plan.binary
        return {
            "traceEvents": self.meta + self.events,
            "displayTimeUnit": "ns",
            "otherData": {
                "binary": str(binary.path) if binary.path else None,
                "producer": binary.producer,
                "version": ".".join(map(str, binary.version)),
                "loops": self.loops,
                "passing_loops_not_traced": self.untraced,
            },
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the trace atomically; open it at https://ui.perfetto.dev."""
        text = json.dumps(self.to_trace(), default=str, allow_nan=False)
        write_atomically(path, text.encode())
