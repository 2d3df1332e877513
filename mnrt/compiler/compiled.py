"""CompiledFunction: a graph lowered onto a Context's device with its weights resident,
called like a function, and saved as a light binary with goldens."""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..capture import CaptureError, capture_if_idle, vouch
from ..errors import DTypeError, InvalidArgumentError, UseAfterFreeError
from ..host import Buffer, CommandQueue, observe
from ..user_warning import warn
from . import codegen, goldens, release
from .codegen import CAPTURE_RUNNING
from .ir import INPUT, PARAM, Graph
from .lower import Lowered, lower
from .options import CompileOptions
from .tensors import (
    TensorProxy,
    as_array,
    as_host,
    call_input,
    check_mapping,
    input_arrays,
    stored_form,
)

if TYPE_CHECKING:
    from .context import Context


def _refuse_registered_of_another_dtype(ctx: Context, graph: Graph, options: Any) -> None:
    """A registered value must be bound, not silently copied: when float_dtype makes the
    model's parameter of that name and shape another dtype (half under mixed), the function
    would compute with its own copy and never see updates to the registered value. Say which
    dtype to register it in instead. (A shape that differs is warned about after binding.)"""
    wrong = [
        (name, ctx.registered[name].buffer.dtype, graph.values[name].dtype)
        for name in graph.params
        if name in ctx.registered
        and ctx.registered[name].shape == graph.values[name].shape
        and ctx.registered[name].buffer.dtype is not graph.values[name].dtype
    ]
    if wrong:
        raise DTypeError(
            f"compiled graph '{graph.name}' (float_dtype={options['float_dtype']}) cannot bind "
            + ", ".join(
                f"registered value {name!r}: it is {have.name}, the graph's parameter is "
                f"{need.name}"
                for name, have, need in wrong
            )
            + "; register it in the graph's dtype (ctx.register_param(name, array, "
            + f"dtype={wrong[0][2].name!r})) or compile with the float_dtype it was "
            + "registered for"
        )


class CompiledFunction:
    """A graph lowered onto the context's device, weights resident."""

    def __init__(
        self,
        ctx: Context,
        graph: Graph,
        options: CompileOptions,
        source: Graph,
        inputs: Mapping[str, np.ndarray],
        share: bool = True,
    ) -> None:
        self.ctx = ctx
        self.graph = graph
        self.options = options
        self.source = source  # the graph as given, before any pass: the reference
        # ONNX inputs the import folded into constants (an op needed their values then):
        # name -> the example value compiled in. Calls may pass them only with that value.
        self.folded: dict[str, np.ndarray] = {}
        # Outputs the model computes in a wider float than this function: name -> that dtype.
        self._wider = {
            name: want.name
            for name in graph.outputs
            if (v := source.values.get(name)) is not None
            and (want := v.dtype).is_float
            and want.itemsize > graph.values[name].dtype.itemsize
        }
        self.onnx_model: Any = None  # the ONNX model it came from, if it did
        self.model_file: Path | None = None  # the file it was compiled from, if given one
        self.model_stamp: tuple[int, int] | None = None  # its size and mtime then
        self.stages: list[tuple[str, str]] = []  # (phase, graph dump) of the compile
        unbound = [n for n in graph.outputs if graph.values[n].role in (INPUT, PARAM)]
        if unbound:
            raise InvalidArgumentError(
                f"output(s) {', '.join(map(repr, unbound))} of graph '{graph.name}' are not "
                "computed by any node (a parameter or an input given back as is); compute "
                "them, or read the value where it comes from"
            )
        if share:
            _refuse_registered_of_another_dtype(ctx, graph, options)
        ctx.orphans.release()
        self.lowered: Lowered = lower(graph, ctx.device)  # first: a model too big fails here
        self.example_inputs = {k: np.array(v) for k, v in inputs.items()}
        # Registered values this function is bound to (share=False: it owns every buffer).
        self.shared: dict[str, TensorProxy] = {}
        self._weights: dict[int, tuple[Buffer, Callable[[], np.ndarray]]] | None = None
        # The buffers it owns, freed by close() or, once the function is dropped, by the
        # context (see release.py): the lowering's (a registered value it binds later
        # replaces one, which it frees, and stays the context's).
        owned = list(self.lowered.bindings.values())
        self._finalizer = weakref.finalize(self, ctx.orphans.adopt, owned)
        try:
            self._upload(ctx, graph, share)
        except BaseException:
            self.close()
            raise
        if share:
            self._warn_unbound(ctx, source)

    def _upload(self, ctx: Context, graph: Graph, share: bool) -> None:
        """Write the weights, or bind the registered values of the same shape and dtype."""
        q = ctx.queue
        for name in graph.params:
            shared = ctx.registered.get(name) if share else None
            buf = self.lowered.bindings.get(name)
            if buf is None:  # a parameter no kernel reads: nothing to upload
                continue
            if (
                shared is not None
                and shared.shape == buf.shape
                and shared.buffer.dtype is buf.dtype
            ):
                self.lowered.bindings[name] = shared.buffer
                self.shared[name] = shared
                buf.deallocate()
            else:
                q.enqueue_write_buffer(buf, as_host(graph.values[name].data, buf))
        q.finish()

    def close(self) -> None:
        """Free the device memory this function owns now (registered values it binds stay
        the context's). Idempotent; calling the function afterwards raises. A function
        dropped without it has its memory freed at the context's next compile, call or
        close."""
        held = self._finalizer.detach()
        if held is not None:
            release.free(held[2][0])
        self.ctx.orphans.release()

    def __enter__(self) -> CompiledFunction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, what: str) -> None:
        """Refuse `what` once closed. Otherwise free what dropped functions left: a host
        call of the context's is a moment when that is safe (see release.py)."""
        if not self._finalizer.alive:
            raise UseAfterFreeError(
                f"cannot {what}: compiled function '{self.graph.name}' was closed, which "
                "freed its device memory; compile the model again"
            )
        self.ctx.orphans.release()

    def _warn_unbound(self, ctx: Context, source: Graph) -> None:
        """Registered values that a parameter of the model was meant to use but the compiled
        graph cannot: converted to another precision (float_dtype) or folded into other
        weights. The function computes with its own copy, so say that updates to the
        registered value will not reach it."""
        missed = sorted(n for n in ctx.registered if n in source.params and n not in self.shared)
        shaped = [n for n in missed if ctx.registered[n].shape != source.values[n].shape]
        if shaped:
            warn(
                f"compiled graph '{self.graph.name}' does not bind registered value(s) "
                + ", ".join(
                    f"{n!r} (registered {list(ctx.registered[n].shape)}, the model's "
                    f"parameter {list(source.values[n].shape)})"
                    for n in shaped
                )
                + ": the shapes differ, so this function uses its own copy of the parameter",
            )
            missed = [n for n in missed if n not in shaped]
        if missed:  # a dtype the compile changed is an error (before lowering): folded
            warn(
                f"compiled graph '{self.graph.name}' does not bind registered value(s) "
                f"{', '.join(map(repr, missed))}: the compile folded the parameter into other "
                "weights, so this function uses its own copy and later updates to the "
                "registered value do not reach it",
            )

    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)

    def allocate_input_proxy(self, name: str) -> TensorProxy:
        """The device tensor an input is read from, to fill with `load_from`."""
        self._check_open("allocate an input proxy")
        if not isinstance(name, str) or name not in self.graph.inputs:
            raise InvalidArgumentError(
                f"no input {name!r}; the inputs are {', '.join(self.graph.inputs)}"
            )
        return TensorProxy(self.ctx.queue, self.lowered.bindings[name], self)

    def _every_input(self, inputs: Any, what: str) -> dict[str, np.ndarray]:
        """`inputs` of a save_binary or a reference: an array for every input (a folded
        one, if given, with the value compiled in)."""
        check_mapping(inputs, what)
        return input_arrays(self.graph, self._without_folded(dict(inputs)), what)

    def _without_folded(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """`inputs` less the folded ones, each of which must hold the value compiled in: a
        program that ignored another value would answer for the wrong input."""
        for name in set(inputs) & set(self.folded):
            given, want = inputs.pop(name), self.folded[name]
            same = not isinstance(given, TensorProxy) and _same_value(given, want)
            if not same:
                raise InvalidArgumentError(
                    f"input {name!r} was folded into the program when it was compiled (an op "
                    f"needs its value then: {want.tolist() if want.size <= 8 else want.shape}); "
                    "a call takes only that value: compile again to use another"
                )
        return inputs

    def __call__(self, inputs: Mapping[str, Any] | None = None) -> dict[str, TensorProxy]:
        """Run once. Inputs not given keep what their proxies hold. The outputs are proxies
        of this function's output buffers: the next call (or save_binary) overwrites them."""
        self._check_open("call it")
        if inputs is not None:
            check_mapping(inputs, "call")
        inputs = self._without_folded(dict(inputs or {}))
        unknown = sorted(repr(n) for n in set(inputs) - set(self.graph.inputs))
        if unknown:
            raise InvalidArgumentError(
                f"unknown input(s) {', '.join(unknown)}; "
                f"the inputs are {', '.join(self.graph.inputs)}"
            )
        q = self.ctx.queue
        for name, data in inputs.items():
            if isinstance(data, TensorProxy):
                if data.buffer is not self.lowered.bindings.get(name):
                    raise InvalidArgumentError(
                        f"input {name!r}: pass arrays, or the proxy from allocate_input_proxy"
                    )
                continue
            buf = self.lowered.bindings.get(name)
            if buf is None:  # no kernel reads it (an ONNX input only Shape reads): no buffer
                as_array(name, data)
                continue
            q.enqueue_write_buffer(buf, call_input(name, data, buf))
        # A capture of this call records the weights from the arrays they were written
        # from, as save_binary does, not from a copy of the device's memory.
        vouch(self._weights_as_stored)
        q.enqueue_program(self.lowered.program, self.lowered.bindings)
        return {
            name: TensorProxy(q, self.lowered.bindings[name], self, self._wider.get(name, ""))
            for name in self.graph.outputs
        }

    def reference(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's reference outputs (goldens.reference: onnxruntime for an ONNX model
        when installed, else the graph run in double precision), which the compile checks
        the compiled result against when it saves a binary."""
        return goldens.reference(self, self._every_input(inputs, "reference"))[1]

    def report(self, phases: list[dict]) -> dict:
        """report.json of codegen_dir (see codegen.report)."""
        return codegen.report(self, phases)

    def write_codegen_dir(
        self, folder: str | os.PathLike, phases: list[dict] | None = None, what: str = "codegen_dir"
    ) -> None:
        """Write this function's codegen_dir (see codegen.write); `phases`: the compile's
        phases so far (report.json's), none for a function written again later."""
        if phases is not None and not (
            isinstance(phases, list) and all(isinstance(p, dict) for p in phases)
        ):
            raise InvalidArgumentError(
                f"write_codegen_dir: phases must be a list of dicts, got {phases!r:.60}"
            )
        codegen.write(self, folder, [] if phases is None else phases, what)

    def save_binary(
        self, path: str | os.PathLike, inputs: Mapping[str, np.ndarray] | None = None
    ) -> None:
        """Record one run (weights, program, inputs) into a light binary whose goldens are
        the run's own results, with the tolerance model's bounds (compiler/goldens.py); the
        results are checked against `reference` too, and a miss warns. The function's inputs
        hold afterwards what they held before: a later call that gives none still uses them
        (its outputs, like any call's, are overwritten)."""
        if self.save_binary_and_check(path, inputs) is None:
            raise CaptureError(
                f"cannot save_binary: {CAPTURE_RUNNING}; call save_binary after end_capture()"
            )

    def _weights_as_stored(self) -> dict[int, tuple[Buffer, Callable[[], np.ndarray]]]:
        """What the buffers of the parameters this function uploaded hold, in their stored
        form, for the capture of its binary to record instead of a copy (see
        capture_if_idle): they were written from the graph's arrays, which nothing changes
        (passes replace arrays, never write into them), and no kernel writes a parameter.
        Registered values are left out: their owner may change them. Worked out once (a
        capture asks at every call): what is bound where does not change after the compile."""
        if self._weights is None:
            self._weights = {
                id(buf): (buf, stored_form(self.graph.values[name].data, buf))
                for name in self.graph.params
                if (buf := self.lowered.bindings.get(name)) is not None and name not in self.shared
            }
        return self._weights

    def save_binary_and_check(
        self, path: str | os.PathLike, inputs: Mapping[str, np.ndarray] | None = None
    ) -> dict | None:
        """save_binary, returning its accuracy check against the reference (goldens.accuracy:
        what codegen_dir's report.json shows); None, with nothing written, where a capture
        of the user's is running (save_binary raises instead)."""
        self._check_open("save its binary")
        codegen.check_binary_spares_model(path, self.model_file)
        # the reference needs every input, as the replay will
        inputs = self.example_inputs if inputs is None else self._every_input(inputs, "save_binary")
        # Outside the lock, so that other compiles need not wait for it, and unobserved: a
        # capture of the user's may be running, and this is none of its business. From
        # onnxruntime, it runs once the recorded run is done (see PendingReference).
        with observe.unobserved():
            reference = goldens.PendingReference(self, inputs)
        try:
            results = self._record(path, inputs, reference.start)
        except BaseException:
            with contextlib.suppress(Exception):  # not left running; the first error stands
                reference.result()
            raise
        source, expected = reference.result()
        if results is None:
            return None
        return goldens.accuracy(self, results, source, expected)

    def _record(
        self, path: str | os.PathLike, inputs: Mapping[str, np.ndarray], ran: Callable[[], None]
    ) -> dict[str, np.ndarray] | None:
        """Record one run on `inputs` into a light binary at `path`, calling `ran` once the
        device has run it; the values its goldens check, or None when a capture (of the
        user's) is running."""
        q = self.ctx.queue
        description = f"compiled graph {self.graph.name}"
        owner = f"compiled graph '{self.graph.name}' is recording its light binary"
        held = None  # what the inputs hold, put back once the capture has ended, however
        with _recording:
            try:
                weights = self._weights_as_stored()
                with capture_if_idle(
                    path, False, description, owner, fingerprints=True, contents=weights
                ) as recording:
                    if not recording:
                        return None
                    with observe.unobserved():
                        held = {
                            name: (buf, TensorProxy(q, buf).cpu())
                            for name in self.graph.inputs
                            if (buf := self.lowered.bindings.get(name)) is not None
                        }
                    self(inputs)
                    results = goldens.record_goldens(self, q)  # reads: the run is done
                    ran()
            finally:
                if held is not None:  # before another thread records: none of its business
                    with observe.unobserved():
                        _put_back(q, held)
        return results


def _put_back(q: CommandQueue, held: dict[str, tuple[Buffer, np.ndarray]]) -> None:
    for buf, data in held.values():
        q.enqueue_write_buffer(buf, as_host(data, buf))
    q.finish()


# A process runs one capture at a time (a capture records every thread), so compiles that
# write light binaries on several threads take turns rather than fail. While a capture of
# the user's runs, a binary cannot be recorded: it would need a second capture, and its
# run of the compiled function would land in the user's.
_recording = threading.Lock()


def _new_lock_in_child() -> None:
    """A child forked while another thread recorded has the lock held by no thread."""
    global _recording
    _recording = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def _same_value(given: Any, want: np.ndarray) -> bool:
    try:
        array = np.asarray(given)
    except (TypeError, ValueError):
        return False
    return array.shape == want.shape and bool(np.array_equal(array, want))
