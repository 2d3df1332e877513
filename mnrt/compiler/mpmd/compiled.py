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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ...capture import CaptureError, capture_if_idle, compare_to_golden, vouch
from ...device.cost import model_transfer
from ...device.parallel import sharing_cores
from ...device.spec import MNCORE2
from ...device.tolerance import golden_tolerance
from ...errors import InvalidArgumentError
from ...host import Buffer, CommandQueue, Device, Event, observe
from ...host.timeline import Span, Timeline, schedule
from .. import goldens, placement
from ..codegen import CAPTURE_RUNNING, check_binary_spares_model
from ..ir import INPUT, PARAM, TEMP, Graph, Value
from ..lower import Lowered, lower
from ..tensors import HostArray, as_array, as_host, check_kind, check_mapping, stored_form
from .cost import program_cost
from .ir import Fragment, MpmdProgram, Transfer
from .microbatches import every_microbatch, rank_of, split_microbatches
from .options import MpmdOptions
from .schedule import Plan

if TYPE_CHECKING:
    from ..context import Context
    from ..release import Orphans
    from ..shared_devices import SharedDevices


def fragment_graph(program: MpmdProgram, fragment: Fragment, sram_budget: int) -> Graph:
    """The fragment as a graph of its own: its operands are its inputs, its results its
    outputs, its parameters its own. Whatever crosses fragments is in DRAM (a copy or
    another program reads it); the rest stays where the compile's scheduler put it, unless
    the fragment's own order would then hold more than the budget on chip, when it is
    placed again greedily. Its chains get the room that leaves them (placement.chain_room).
    Values that share a buffer (views.py) share it here when the fragment holds all of them
    and none crosses to it, or from it but their buffer; otherwise each has its own, and
    the concatenation or reshape between them runs."""
    values = {}
    for node in fragment.nodes:
        for name in (*node.inputs, *node.outputs):
            v = program.values[name]
            role = INPUT if name in fragment.inputs else PARAM if v.role == PARAM else TEMP
            where = v.location if role == TEMP and name not in fragment.outputs else "dram"
            values[name] = Value(name, v.shape, v.dtype, role, where, v.layout, v.data)
    groups: dict[str, list[str]] = {}
    for name, v in program.values.items():
        if v.view is not None:
            groups.setdefault(v.view[0], []).append(name)
    for root, members in groups.items():
        crossing = {root, *members} & set(fragment.inputs) or set(members) & set(fragment.outputs)
        if root in values and all(m in values for m in members) and not crossing:
            for m in members:
                values[m].view = program.values[m].view
    graph = Graph(
        fragment.name,
        values,
        list(fragment.nodes),
        list(fragment.inputs),
        list(fragment.outputs),
    )
    graph.verify()
    kept = placement.summary(graph, sram_budget)
    if kept["peak_on_chip_bytes"] > kept["budget_bytes"]:
        graph = placement.place(graph, sram_budget)
    return placement.chain_room(graph, sram_budget)


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
        self.stages: list[tuple[str, str]] = []  # (phase, graph dump) of the compile
        self.model_file: Path | None = None  # the file it was compiled from, if given one
        self.model_stamp: tuple[int, int] | None = None  # its size and mtime then
        # What its reference computes (goldens.reference): the graph as imported, before any
        # pass, and the ONNX model it came from. Set by the compile.
        self.source: Graph = graph
        self.onnx_model: Any = None
        self.shared: dict = {}  # registered values it is bound to: none
        self.passes: list[tuple[str, str]] = []  # (pass, MPMD IR text) after each
        self.example_inputs = {k: np.array(v) for k, v in inputs.items()}
        self.devices: dict[int, Device] = {}
        acquired: list[Device] = []  # of the context's shared devices (shared_devices.py)
        # Its buffers, on devices that other functions may use too: freed as a
        # CompiledFunction's are (see compiler/release.py).
        self._held: list[Buffer] = []
        self._finalizer = weakref.finalize(
            self, _release, ctx.pipeline_devices, acquired, ctx.orphans, self._held
        )
        self._buffers: dict[tuple[str, int], Buffer] = {}
        self._copy_queues: dict[tuple[int, int], CommandQueue] = {}  # by (device, index)
        self._commands: list[Command] | None = None
        self.program_of = {f.name: f for f in program.fragments}
        self.where = program.device_of()
        self.lowered: dict[str, Lowered] = {}
        # id(buffer) -> (buffer, its stored contents) of every weight uploaded: what a capture
        # of this function records them from (see capture.vouch).
        self._weights: dict[int, tuple[Buffer, Callable[[], np.ndarray]]] = {}
        try:
            for index in mpmd.devices:
                if index == ctx.device.index:
                    self.devices[index] = ctx.device
                else:
                    self.devices[index] = ctx.pipeline_devices.acquire(index)
                    acquired.append(self.devices[index])
            self.queues = {i: d.command_queue(COMPUTE) for i, d in self.devices.items()}
            self._load(options["sram_budget"])
        except BaseException:
            self.close()  # a device that would not open, a model too big: none kept
            raise

    def _load(self, sram_budget: int) -> None:
        """Each fragment lowered onto its device, its weights uploaded."""
        for fragment in self.program.fragments:
            sub = fragment_graph(self.program, fragment, sram_budget)
            lowered = lower(sub, self.devices[fragment.device])
            self._held += lowered.bindings.values()
            self.lowered[fragment.name] = lowered
            q = self.queues[fragment.device]
            for name in sub.params:
                if name in lowered.bindings:
                    buf = lowered.bindings[name]
                    q.enqueue_write_buffer(buf, as_host(sub.values[name].data, buf))
                    self._weights[id(buf)] = (buf, stored_form(sub.values[name].data, buf))
        for q in self.queues.values():
            q.finish()
        # Every queue and buffer a run uses, made now, as a single-device compile makes its
        # own: a capture of a run then finds them all already there, whether it is the
        # first run or not, and records the same binary (made during the first, they were
        # logged in another order).
        for c in self.commands():
            self.queue(c.device, c.queue)
            for name in self._values_of(c):
                self.buffer(name, c.microbatch)

    def _values_of(self, c: Command) -> tuple[str, ...]:
        """The values whose buffers (of microbatch c.microbatch) command `c` uses."""
        if c.kind in ("write", "read"):
            return (c.value,)
        if c.kind == "copy":
            return (c.transfer.source, c.transfer.result)
        if c.kind == "program":
            fragment = self.program_of[c.value]
            return (*fragment.inputs, *fragment.outputs)
        return ()

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
        """The graph's output names: a call's results are keyed by them (the program may
        return a copy under another name, see uniquify-function-inputs-outputs)."""
        return list(self.graph.outputs)

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
            self._held.append(self._buffers[key])
        return self._buffers[key]

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        check_mapping(inputs, "call")
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
            array = as_array(name, inputs[name])
            want = (self.microbatches, *self.program.values[name].shape)
            if array.shape != want:
                raise InvalidArgumentError(
                    f"input {name!r} has shape {array.shape}; a pipelined call takes each input "
                    f"with a leading microbatch axis: {want} ({self.microbatches} microbatches "
                    f"of {self.program.values[name].shape})"
                )
            check_kind(name, array, self.program.values[name].dtype)
            out[name] = array
        return out

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, HostArray]:
        """Run every microbatch through the pipeline; each output stacked (M, *shape), an
        ndarray that answers `.cpu()` as a single-device function's outputs do."""
        reads = self._run(self._check_inputs(inputs))
        return {
            out: np.stack([reads[(name, m)] for m in range(self.microbatches)]).view(HostArray)
            for out, name in zip(self.graph.outputs, self.program.outputs)
        }

    def commands(self) -> list[Command]:
        """What one call enqueues, in order (see Command); the same list is run and priced."""
        if self._commands is None:
            self._commands = _commands(self.program, self.plan)
        return self._commands

    def _enqueue(self, arrays: Mapping[str, np.ndarray]) -> dict[tuple[str, int], np.ndarray]:
        """Enqueue one run; the arrays the output reads fill by finish(), by (name, m)."""
        vouch(lambda: self._weights)  # a capture records them from their arrays, not copies
        events: dict[tuple, Event] = {}
        reads: dict[tuple[str, int], np.ndarray] = {}
        for c in self.commands():
            q = self.queue(c.device, c.queue)
            if c.kind == "write":
                buf = self.buffer(c.value, c.microbatch)
                q.enqueue_write_buffer(buf, as_host(arrays[c.value][c.microbatch], buf))
            elif c.kind == "copy":
                t = c.transfer
                q.enqueue_copy_buffer(
                    self.buffer(t.source, c.microbatch), self.buffer(t.result, c.microbatch)
                )
            elif c.kind == "record_event":
                events[c.event] = q.record_event()
            elif c.kind == "wait_event":
                q.wait_event(events[c.event])
            elif c.kind == "read":
                reads[(c.value, c.microbatch)] = q.enqueue_read_buffer(
                    self.buffer(c.value, c.microbatch), blocking=False
                )
            else:
                fragment = self.program_of[c.value]
                bindings = dict(self.lowered[fragment.name].bindings)
                for name in (*fragment.inputs, *fragment.outputs):
                    bindings[name] = self.buffer(name, c.microbatch)
                q.enqueue_program(self.lowered[fragment.name].program, bindings)
        return reads

    def queue(self, device: int, index: int) -> CommandQueue:
        """Queue `index` of `device` (COMPUTE, TRANSFERS or HOST), opened on first use."""
        if index == COMPUTE:
            return self.queues[device]
        if (device, index) not in self._copy_queues:
            self._copy_queues[(device, index)] = self.devices[device].command_queue(index)
        return self._copy_queues[(device, index)]

    def _run(self, arrays: Mapping[str, np.ndarray]) -> dict[tuple[str, int], np.ndarray]:
        """Enqueue one run and wait for it, with BLAS sharing the cores among the devices
        as a replay of the binary shares them (`sharing_cores`): OpenBLAS rounds a product
        differently on another thread count, so a capture run otherwise would not replay
        bit for bit."""
        with sharing_cores(len(self.devices)):
            reads = self._enqueue(arrays)
            self._finish()
        return reads

    def _finish(self) -> None:
        for q in (*self._copy_queues.values(), *self.queues.values()):
            q.finish()

    # --- the modelled timeline ------------------------------------------------------------
    def spans(self) -> list[Span]:
        """One call as mnrt.host.timeline spans (inputs written, programs, copies, events,
        outputs read), each priced as the device prices it."""
        spec = MNCORE2
        spans: list[Span] = []
        recorded: dict[tuple, int] = {}
        for c in self.commands():
            cost, kw = None, {}
            if c.kind in ("write", "read"):
                cost = model_transfer(spec, self.nbytes(c.value))
            elif c.kind == "copy":
                nbytes = self.nbytes(c.transfer.source)
                cost = spec.copy_cost(c.transfer.src, c.transfer.dst, nbytes)
                kw = {"link": (c.transfer.src, c.transfer.dst), "nbytes": nbytes}
            elif c.kind == "wait_event":
                kw = {"after": (recorded[c.event],)}
            elif c.kind == "program":
                lowered = self.lowered[c.value]
                cost = program_cost(lowered.program, lowered.bindings)
            key = len(spans)
            if c.kind == "record_event":
                recorded[c.event] = key
            time_s, energy = (cost.time_s, cost.energy_j) if cost is not None else (0.0, 0.0)
            spans.append(Span(key, c.device, c.queue, c.kind, c.name, time_s, energy, **kw))
        return spans

    def timeline(self) -> Timeline:
        """One call on the modelled timeline: makespan, bubble fraction, per-device use."""
        return schedule(self.spans(), MNCORE2)

    def nbytes(self, name: str) -> int:
        """Bytes of one microbatch's value `name` (what a transfer of it moves)."""
        v = self.program.values[name]
        return math.prod(v.shape) * v.dtype.itemsize

    # --- light binary -----------------------------------------------------------------------
    def save_binary(
        self, path: str | os.PathLike, inputs: Mapping[str, np.ndarray] | None = None
    ) -> None:
        """Capture one pipelined run (every device's writes, programs, copies and events)
        into a multi-device light binary whose goldens are the run's outputs, each checked
        with the tolerance model's bound for its value, and whose kernels are fingerprinted
        (as a single-device compile's are: `mnrt run --locate`). Each microbatch's outputs
        are then checked against the model's reference, as a single-device compile's are:
        a miss warns, naming the output and microbatch (`name#m`, as its golden is named)."""
        if self.save_binary_and_check(path, inputs) is None:
            raise CaptureError(
                f"cannot save_binary: {CAPTURE_RUNNING}; call save_binary after end_capture()"
            )

    def save_binary_and_check(
        self, path: str | os.PathLike, inputs: Mapping[str, np.ndarray] | None = None
    ) -> dict | None:
        """save_binary, returning its check against the reference (goldens.accuracy's
        record, its outputs by golden name); None, with nothing written, where a capture of
        the user's is running (save_binary raises instead). `inputs` as the compile takes
        them: each with a leading microbatch axis, or one microbatch's, repeated."""
        check_binary_spares_model(path, self.model_file)
        if inputs is None:
            inputs = self.example_inputs
        elif isinstance(inputs, Mapping):
            ranks = {name: len(self.program.values[name].shape) for name in self.program.inputs}
            examples, runs = split_microbatches(ranks, inputs, self.microbatches)
            alike = {k: v for k, v in examples.items() if rank_of(v) == ranks.get(k)}
            inputs = {**examples, **every_microbatch(alike, runs, self.microbatches)}
        arrays = self._check_inputs(inputs)
        errors = goldens.value_errors(self.graph)
        description = f"pipelined graph {self.program.name}"
        results: dict[str, np.ndarray] = {}
        dtypes = {}
        with capture_if_idle(
            path, False, description, fingerprints=True, contents=self._weights
        ) as recording:
            if not recording:
                return None
            self._run(arrays)
            for out, name in zip(self.graph.outputs, self.program.outputs):
                q = self.queues[self.where[name]]
                for m in range(self.microbatches):
                    buf = self.buffer(name, m)
                    golden = q.enqueue_read_buffer(buf)
                    rtol, atol = golden_tolerance(buf.dtype, errors[out], golden)
                    compare_to_golden(q, buf, golden, rtol=rtol, atol=atol, name=f"{out}#{m}")
                    results[f"{out}#{m}"], dtypes[f"{out}#{m}"] = golden, buf.dtype
        return self._accuracy(arrays, results, dtypes)

    def _accuracy(
        self, arrays: Mapping[str, np.ndarray], results: Mapping[str, np.ndarray], dtypes: dict
    ) -> dict:
        """The outputs of a run on `arrays` (`results`, by golden name) against the model's
        reference on each microbatch's inputs (computed once for microbatches alike, as the
        example inputs' are)."""
        from ..compiled import CompiledFunction

        computed: list[tuple[dict[str, np.ndarray], dict]] = []
        expected, source = {}, ""
        for m in range(self.microbatches):
            inputs = {k: v[m] for k, v in arrays.items()}
            ref = next((r for given, r in computed if _same_arrays(given, inputs)), None)
            if ref is None:
                with observe.unobserved():
                    source, ref = goldens.reference(self, inputs, CompiledFunction)
                computed.append((inputs, ref))
            expected.update((f"{out}#{m}", ref[out]) for out in self.graph.outputs)
        float_dtype = self.options["float_dtype"]
        return {
            "reference": source,
            "float_dtype": float_dtype,
            "outputs": goldens.compare_outputs(
                self.program.name,
                float_dtype,
                results,
                source,
                expected,
                dtypes,
                quantized=goldens.quantizes(self.graph),
            ),
        }

    def close(self) -> None:
        """Free its memory, and close the devices besides the Context's own that no other
        function of the Context uses."""
        self._finalizer()
        self._weights.clear()
        self.ctx.orphans.release()


def _release(
    shared: SharedDevices, devices: list[Device], orphans: Orphans, held: list[Buffer]
) -> None:
    """What a pipelined function holds, given back (it may be dropped on any thread, at
    any moment): its buffers to the context to free, and its devices, which close now if
    no other function uses them (freeing its buffers there at once)."""
    orphans.adopt(held)
    shared.release(devices)


def _same_arrays(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# Queue indices on each device: programs; outgoing copies; the host's writes of inputs and
# reads of outputs.
COMPUTE, TRANSFERS, HOST = 0, 1, 2


class Command(NamedTuple):
    """One host call of a pipelined run. `value`: the input written or the fragment run;
    `event`: the key of the event a record_event makes or a wait_event waits for."""

    kind: str  # "write" | "program" | "copy" | "record_event" | "wait_event" | "read"
    device: int
    queue: int
    name: str
    microbatch: int
    value: str = ""
    transfer: Transfer | None = None
    event: tuple = ()


def _commands(program: MpmdProgram, plan: Plan) -> list[Command]:
    """The calls of one run. Every microbatch's inputs are written first, on their device's
    host queue (the host has them all), each followed by an event (and by its copies to
    other devices, on that queue). Then, in the
    schedule's global order, per (stage, microbatch): on the compute queue a wait for each
    operand that was written or moved there, the program, and (when another device reads
    a result) an event the transfer queue waits for before its copies, each copy followed
    by the event the reader waits for; the host queue reads the function's results of that
    microbatch once the program is done. Copies and reads on queues of their own overlap
    the next program, as DMA engines do."""
    out: list[Command] = []
    M = len({t.microbatch for t in plan.order})
    outgoing: dict[str, list[Transfer]] = {}
    for t in program.transfers:
        outgoing.setdefault(t.source, []).append(t)
    ready: set[tuple] = set()  # (value, microbatch) whose arrival an event marks

    def move(t: Transfer, m: int, queue: int = TRANSFERS) -> None:
        out.append(Command("copy", t.src, queue, f"{t.name}#{m}", m, transfer=t))
        out.append(Command("record_event", t.src, queue, f"{t.name}#{m}", m, event=(t.result, m)))
        ready.add((t.result, m))

    for m in range(M):
        for name in program.inputs:
            d = program.homes[name]
            out.append(Command("write", d, HOST, f"{name}#{m}", m, value=name))
            out.append(Command("record_event", d, HOST, f"{name}#{m}", m, event=(name, m)))
            ready.add((name, m))
            for t in outgoing.get(name, ()):
                move(t, m, HOST)
    for task in plan.order:
        f, m = plan.fragments[task.stage], task.microbatch
        for name in f.inputs:
            if (name, m) in ready:
                out.append(
                    Command("wait_event", f.device, COMPUTE, f"{name}#{m}", m, event=(name, m))
                )
        out.append(Command("program", f.device, COMPUTE, f"{f.name}#{m}", m, value=f.name))
        moves = [t for name in f.outputs for t in outgoing.get(name, ())]
        results = [name for name in f.outputs if name in program.outputs]
        if moves or results:
            done = (f.name, m)
            out.append(Command("record_event", f.device, COMPUTE, f"{f.name}#{m}", m, event=done))
        if moves:
            out.append(Command("wait_event", f.device, TRANSFERS, f"{f.name}#{m}", m, event=done))
            for t in moves:
                move(t, m)
        if results:
            out.append(Command("wait_event", f.device, HOST, f"{f.name}#{m}", m, event=done))
            out += [Command("read", f.device, HOST, f"{n}#{m}", m, value=n) for n in results]
    return out
