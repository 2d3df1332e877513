"""PipelinedFunction: an MPMD program on its devices, run microbatch by microbatch in the
order its pipeline schedule gives.

Each fragment is a Program on its device (weights uploaded once). A call takes every input
with a leading microbatch axis (M, *shape) and enqueues, in the schedule's global order,
per (stage, microbatch): the microbatch's inputs written where they live, a wait_event for
every value that arrived by transfer, the fragment's program, then for each of its results
another device reads an `enqueue_copy_buffer` to that device plus a `record_event` (the
copy and the event on the producer's queue, the wait on the consumer's: ISSUE13 section 6).
Values that cross fragments get a buffer per microbatch, so a copy for microbatch m+1
never overwrites what a stage still reads for microbatch m. Under a capture this is a
multi-device light binary `mnrt run` replays.

`spans()` are the commands of one call as the modelled timeline (mnrt.host.timeline) sees
them; `timeline()` schedules them: makespan, bubble fraction, per-device busy time.
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ...capture import CaptureError, capture_if_idle, compare_to_golden
from ...device.cost import model_transfer
from ...device.spec import MNCORE2
from ...device.tolerance import golden_tolerance
from ...errors import InvalidArgumentError, MnrtError
from ...host import Buffer, Device, Event, open_device
from ...host.timeline import Span, Timeline, schedule
from .. import goldens, placement
from ..ir import INPUT, PARAM, TEMP, Graph, Value
from ..lower import Lowered, lower
from ..tensors import as_host
from .cost import program_cost
from .ir import Fragment, MpmdProgram, Transfer
from .options import MpmdOptions
from .schedule import Plan, Task

if TYPE_CHECKING:
    from ..context import Context


def fragment_graph(program: MpmdProgram, fragment: Fragment, sram_budget: int) -> Graph:
    """The fragment as a graph of its own: its operands are its inputs, its results its
    outputs, its parameters its own; placed again, so whatever crosses fragments is in
    DRAM (a copy or another program reads it) and the rest may stay on chip."""
    values = {}
    for node in fragment.nodes:
        for name in (*node.inputs, *node.outputs):
            v = program.values[name]
            role = INPUT if name in fragment.inputs else PARAM if v.role == PARAM else TEMP
            values[name] = Value(name, v.shape, v.dtype, role, "dram", v.layout, v.data)
    graph = Graph(
        fragment.name, values, list(fragment.nodes), list(fragment.inputs),
        list(fragment.outputs),
    )  # fmt: skip
    graph.verify()
    return placement.place(graph, sram_budget)


class PipelinedFunction:
    """A graph compiled into a pipeline over several devices (see the module docstring)."""

    def __init__(
        self,
        ctx: Context,
        program: MpmdProgram,
        plan: Plan,
        mpmd: MpmdOptions,
        options: Any,
        graph: Graph,
        inputs: Mapping[str, np.ndarray],
    ) -> None:
        self.ctx = ctx
        self.program = program
        self.plan = plan
        self.mpmd = mpmd
        self.options = options
        self.graph = graph  # the optimised graph of one microbatch, before partitioning
        self.source = graph
        self.stages: list[tuple[str, str]] = []  # (phase, graph dump) of the compile
        self.passes: list[tuple[str, str]] = []  # (pass, MPMD IR text) after each
        self.example_inputs = {k: np.array(v) for k, v in inputs.items()}
        self.devices: dict[int, Device] = {}
        owned: list[Device] = []
        self._finalizer = weakref.finalize(self, _close_all, owned)
        for index in mpmd.devices:
            if index == ctx.device.index:
                self.devices[index] = ctx.device
            else:
                self.devices[index] = open_device(index)
                owned.append(self.devices[index])
        self.queues = {i: d.command_queue(0) for i, d in self.devices.items()}
        self.where = program.device_of()
        self.lowered: dict[str, Lowered] = {}
        for fragment in program.fragments:
            sub = fragment_graph(program, fragment, options["sram_budget"])
            lowered = lower(sub, self.devices[fragment.device])
            self.lowered[fragment.name] = lowered
            q = self.queues[fragment.device]
            for name in sub.params:
                if name in lowered.bindings:
                    q.enqueue_write_buffer(
                        lowered.bindings[name], as_host(sub.values[name].data, lowered.bindings[name])
                    )
        self._buffers: dict[tuple[str, int], Buffer] = {}
        self._outgoing = {
            f.name: [t for t in program.transfers if t.source in f.defines()]
            for f in program.fragments
        }
        self._inputs_moved = [t for t in program.transfers if t.source in program.homes]
        for q in self.queues.values():
            q.finish()

    # --- what was compiled ----------------------------------------------------------------
    @property
    def fragments(self) -> list[Fragment]:
        return self.program.fragments

    @property
    def transfers(self) -> list[Transfer]:
        return self.program.transfers

    @property
    def input_names(self) -> list[str]:
        return list(self.program.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.program.outputs)

    @property
    def microbatches(self) -> int:
        return self.mpmd.microbatches

    # --- running ----------------------------------------------------------------------------
    def buffer(self, name: str, microbatch: int) -> Buffer:
        """The buffer that holds value `name` of `microbatch` on the device it lives on."""
        key = (name, microbatch)
        if key not in self._buffers:
            v = self.program.values[name]
            device = self.devices[self.where[name]]
            self._buffers[key] = device.create_buffer(v.shape, v.dtype, name=f"{name}#{microbatch}")
        return self._buffers[key]

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if not isinstance(inputs, Mapping):
            raise InvalidArgumentError(
                f"call inputs must be a dict of input name -> array, not {type(inputs).__name__}"
            )
        names = self.program.inputs
        unknown = sorted(set(inputs) - set(names))
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise InvalidArgumentError(
                f"pipelined call: inputs are {', '.join(names)}"
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                + (f"; missing: {', '.join(missing)}" if missing else "")
            )
        out = {}
        for name in names:
            array = np.asarray(inputs[name])
            want = (self.microbatches, *self.program.values[name].shape)
            if array.shape != want:
                raise InvalidArgumentError(
                    f"input {name!r} has shape {array.shape}; a pipelined call takes each input "
                    f"with a leading microbatch axis: {want} ({self.microbatches} microbatches "
                    f"of {self.program.values[name].shape})"
                )
            out[name] = array
        return out

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run every microbatch through the pipeline; each output stacked (M, *shape)."""
        arrays = self._check_inputs(inputs)
        self._enqueue(arrays)
        return self._read_outputs()

    def _enqueue(self, arrays: Mapping[str, np.ndarray]) -> None:
        events: dict[tuple[str, int], Event] = {}
        written: set[tuple[str, int]] = set()
        for task in self.plan.order:
            fragment = self.plan.fragments[task.stage]
            q = self.queues[fragment.device]
            m = task.microbatch
            for name in fragment.inputs:
                if name in self.program.homes and (name, m) not in written:
                    self._write_input(name, m, arrays[name], events)
                    written.add((name, m))
            for name in fragment.inputs:
                if (name, m) in events:
                    q.wait_event(events[(name, m)])
            bindings = dict(self.lowered[fragment.name].bindings)
            for name in (*fragment.inputs, *fragment.outputs):
                bindings[name] = self.buffer(name, m)
            q.enqueue_program(self.lowered[fragment.name].program, bindings)
            for t in self._outgoing[fragment.name]:
                self._transfer(t, m, events)

    def _write_input(self, name: str, m: int, array: np.ndarray, events: dict) -> None:
        """Write one microbatch of an input where it lives, and move it to the devices that
        read it there by transfer."""
        buf = self.buffer(name, m)
        self.queues[self.where[name]].enqueue_write_buffer(buf, as_host(array[m], buf))
        for t in self._inputs_moved:
            if t.source == name:
                self._transfer(t, m, events)

    def _transfer(self, t: Transfer, m: int, events: dict) -> None:
        q = self.queues[t.src]
        q.enqueue_copy_buffer(self.buffer(t.source, m), self.buffer(t.result, m))
        events[(t.result, m)] = q.record_event()

    def _read_outputs(self) -> dict[str, np.ndarray]:
        for q in self.queues.values():
            q.finish()
        out = {}
        for name in self.program.outputs:
            q = self.queues[self.where[name]]
            out[name] = np.stack(
                [q.enqueue_read_buffer(self.buffer(name, m)) for m in range(self.microbatches)]
            )
        return out

    # --- the modelled timeline ------------------------------------------------------------
    def spans(self) -> list[Span]:
        """The commands one call enqueues, as mnrt.host.timeline spans (writes of the
        inputs, programs, copies, events and the reads of the outputs), each priced as the
        device prices it."""
        spec = MNCORE2
        spans: list[Span] = []
        recorded: dict[tuple[str, int], int] = {}
        written: set[tuple[str, int]] = set()

        def add(device: int, kind: str, name: str, cost: Any = None, **kw: Any) -> int:
            time_s, energy = (cost.time_s, cost.energy_j) if cost is not None else (0.0, 0.0)
            spans.append(Span(len(spans), device, 0, kind, name, time_s, energy, **kw))
            return len(spans) - 1

        def transfer(t: Transfer, m: int) -> None:
            nbytes = self._nbytes(t.source)
            copy = add(t.src, "copy", f"{t.name}#{m}", spec.copy_cost(t.src, t.dst, nbytes),
                       link=(t.src, t.dst), nbytes=nbytes)  # fmt: skip
            recorded[(t.result, m)] = add(t.src, "record_event", f"{t.name}#{m}", after=(copy,))

        for task in self.plan.order:
            fragment = self.plan.fragments[task.stage]
            d, m = fragment.device, task.microbatch
            for name in fragment.inputs:
                if name in self.program.homes and (name, m) not in written:
                    written.add((name, m))
                    add(d, "write", f"{name}#{m}", model_transfer(spec, self._nbytes(name)))
                    for t in self._inputs_moved:
                        if t.source == name:
                            transfer(t, m)
            for name in fragment.inputs:
                if (name, m) in recorded:
                    add(d, "wait_event", f"{name}#{m}", after=(recorded[(name, m)],))
            lowered = self.lowered[fragment.name]
            add(d, "program", f"{fragment.name}#{m}", program_cost(lowered.program, lowered.bindings))
            for t in self._outgoing[fragment.name]:
                transfer(t, m)
        for name in self.program.outputs:
            for m in range(self.microbatches):
                add(self.where[name], "read", f"{name}#{m}",
                    model_transfer(spec, self._nbytes(name)))  # fmt: skip
        return spans

    def timeline(self) -> Timeline:
        """One call on the modelled timeline: makespan, bubble fraction, per-device use."""
        return schedule(self.spans(), MNCORE2)

    def _nbytes(self, name: str) -> int:
        v = self.program.values[name]
        return math.prod(v.shape) * v.dtype.itemsize

    # --- light binary -----------------------------------------------------------------------
    def save_binary(
        self, path: str | os.PathLike, inputs: Mapping[str, np.ndarray] | None = None
    ) -> None:
        """Capture one pipelined run (every device's writes, programs, copies and events)
        into a multi-device light binary whose goldens are the run's outputs, each checked
        with the tolerance model's bound for its value."""
        arrays = self._check_inputs(self.example_inputs if inputs is None else inputs)
        errors = goldens.value_errors(self.graph)
        with capture_if_idle(path, False, f"pipelined graph {self.program.name}") as recording:
            if not recording:
                raise CaptureError(
                    "cannot save_binary: a capture is running; call it after end_capture()"
                )
            self._enqueue(arrays)
            for q in self.queues.values():
                q.finish()
            for name in self.program.outputs:
                q = self.queues[self.where[name]]
                error = errors.get(name, 0.0)
                for m in range(self.microbatches):
                    buf = self.buffer(name, m)
                    golden = q.enqueue_read_buffer(buf)
                    rtol, atol = golden_tolerance(buf.dtype, error, golden)
                    compare_to_golden(q, buf, golden, rtol=rtol, atol=atol, name=f"{name}#{m}")

    def close(self) -> None:
        """Close the devices this function opened (the Context's own stays open)."""
        self._finalizer()


def _close_all(devices: list[Device]) -> None:
    """Close every device, each even when closing another reported an error."""
    for device in devices:
        try:
            device.close()
        except MnrtError:
            pass  # a device error not yet reported: the device is released all the same
