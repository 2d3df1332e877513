"""The MLSDK-style entry points: MNDevice, Context, CompiledFunction, TensorProxy.

    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    compiled = ctx.compile(graph_or_onnx, {"x": x}, options={"float_dtype": "mixed"})
    y = compiled({"x": x})["y"].cpu()

Weights are uploaded once, at compile, and stay on the device across calls.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import uuid
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from .._version import __version__
from ..capture import CaptureError, capture_if_idle
from ..errors import InvalidArgumentError, MnrtError
from ..format.files import open_regular, write_atomically
from ..host import Buffer, CommandQueue, Device, observe, open_device
from . import goldens, layout, placement, serialize
from .builder import GraphBuilder
from .goldens import accuracy_tolerance as _tolerance  # noqa: F401  (tests import it here)
from .ir import INPUT, PARAM, Graph
from .lower import Lowered, lower
from .options import CompileOptions, resolve
from .passes import AFTER_FLOAT_DTYPE, PIPELINES, apply_float_dtype
from .schedule import peak_live_bytes, schedule


class CacheOptions:
    """Where compiled graphs are kept: compiling the same model with the same options and
    input shapes (with the same mnrt version) again loads the cached codegen_dir instead of
    compiling. An entry that cannot be loaded (truncated, say) is compiled again."""

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"CacheOptions takes a directory path, not {type(cache_dir).__name__}"
            )
        self.cache_dir = Path(cache_dir)

    def __repr__(self) -> str:
        return f"CacheOptions({str(self.cache_dir)!r})"


class MNDevice:
    """A device named as MLSDK does: "mncore2:auto" or "mncore2:<index>"."""

    def __init__(self, spec: str = "mncore2:auto") -> None:
        arch, _, which = str(spec).partition(":")
        if arch != "mncore2" or not which:
            raise InvalidArgumentError(
                f"device {spec!r}: write 'mncore2:auto' or 'mncore2:<index>'"
            )
        if which == "auto":
            self.index: int | str = "auto"
        elif which.isascii() and which.isdigit():  # int() would take " 1" and other digits
            self.index = int(which)
        else:
            raise InvalidArgumentError(f"device {spec!r}: index must be 'auto' or a number")
        self.spec = spec

    def __repr__(self) -> str:
        return f"MNDevice({self.spec!r})"


class TensorProxy:
    """A tensor that lives on the device; `cpu()` copies it to the host.

    A compiled function's outputs are proxies of its output buffers, which its next call
    overwrites: copy a result with `cpu()` before calling again to keep it."""

    def __init__(self, queue: CommandQueue, buffer: Buffer) -> None:
        self.queue = queue
        self.buffer = buffer

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype.name

    def cpu(self) -> np.ndarray:
        return self.queue.enqueue_read_buffer(self.buffer, blocking=True)

    def load_from(self, array: np.ndarray, clone: bool = True) -> None:
        """Copy host data in. With clone=False the array is used as it is: do not change it
        until the device has read it (the next call or finish())."""
        data = _as_array(self.buffer.name, array)
        if clone and data is array:
            data = data.copy()
        self.queue.enqueue_write_buffer(self.buffer, _as_host(data, self.buffer))

    def __repr__(self) -> str:
        return f"TensorProxy({self.buffer.name}, {self.dtype}{list(self.shape)})"


def _as_host(data: np.ndarray, buf: Buffer) -> np.ndarray:
    """Host data in the dtype the buffer takes. Floats are converted to the compiled
    precision (which the user chose with float_dtype); anything else must already match."""
    host = buf.dtype.host
    if host is None:  # half: takes any float and rounds it
        return data if data.dtype.kind == "f" else data.astype(np.float32)
    if data.dtype != host and data.dtype.kind == host.kind == "f":
        return data.astype(host)
    if data.dtype != host and data.dtype.kind in "iu" and host.kind in "iu":
        _check_int_range(data, host, buf.name)
        return data.astype(host)  # ONNX int64 indices run as the device's int32
    return data


def _call_input(name: str, data: Any, buf: Buffer) -> np.ndarray:
    """An input of a call, as the buffer takes it and owned by the call: the queue writes it
    after the call has returned, when the caller may already be refilling its array."""
    array = _as_array(name, data)
    host = _as_host(array, buf)
    return host.copy() if host is array else host


def _check_int_range(data: np.ndarray, host: np.dtype, name: str) -> None:
    """Narrowing integers (int64 to the device's int32) must not wrap around: an index of
    2**32 + 1 would silently become 1."""
    info = np.iinfo(host)
    if data.size and (data.min() < info.min or data.max() > info.max):
        raise InvalidArgumentError(
            f"{name}: integer data from {data.min()} to {data.max()} does not fit the device's "
            f"{host} [{info.min}, {info.max}] (the device has no int64); pass values in range"
        )


def _as_array(name: str, data: Any) -> np.ndarray:
    """An input's data as a numeric numpy array, or an error naming the input."""
    try:
        array = np.asarray(data)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"input {name!r} is not an array: {e}") from None
    if array.dtype.kind not in "biuf":
        raise InvalidArgumentError(
            f"input {name!r} is {type(data).__name__} of dtype {array.dtype}; "
            "pass a numeric numpy array"
        )
    return array


def _input_arrays(graph: Graph, inputs: Any, what: str = "compile") -> dict[str, np.ndarray]:
    """The inputs of a compile (or a save_binary) checked against the graph: exactly its
    input names, each a numeric array of the input's shape."""
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, Mapping):
        raise InvalidArgumentError(
            f"{what} inputs must be a dict of input name -> array, not {type(inputs).__name__}"
        )
    missing = [n for n in graph.inputs if n not in inputs]
    unknown = [repr(n) for n in inputs if n not in graph.inputs]
    if missing or unknown:
        raise InvalidArgumentError(
            f"{what} inputs must be exactly {', '.join(graph.inputs) or 'none'}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(unknown)}" if unknown else "")
        )
    arrays = {name: _as_array(name, inputs[name]) for name in graph.inputs}
    for name, array in arrays.items():
        want = graph.values[name].shape
        if array.shape != want:
            raise InvalidArgumentError(
                f"input {name!r} has shape {array.shape}, the model takes {want}"
            )
    return arrays


def _make_dir(folder: Path, what: str) -> Path:
    """Create a directory the compiler writes into, or say why it cannot be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgumentError(
            f"{what} {folder}: cannot create it as a directory ({e.strerror or e}); "
            "give a writable directory path"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidArgumentError(
            f"{what} {folder}: the directory is not writable; give a writable directory path"
        )
    return folder


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
        self.onnx_model: Any = None  # the ONNX model it came from, if it did
        self.stages: list[tuple[str, str]] = []  # (phase, graph dump) of the compile
        unbound = [n for n in graph.outputs if graph.values[n].role in (INPUT, PARAM)]
        if unbound:
            raise InvalidArgumentError(
                f"output(s) {', '.join(map(repr, unbound))} of graph '{graph.name}' are not "
                "computed by any node (a parameter or an input given back as is); compute "
                "them, or read the value where it comes from"
            )
        self.lowered: Lowered = lower(graph, ctx.device)  # first: a model too big fails here
        self.example_inputs = {k: np.array(v) for k, v in inputs.items()}
        # Registered values this function is bound to (share=False: it owns every buffer).
        self.shared: dict[str, TensorProxy] = {}
        q = ctx.queue
        for name in graph.params:
            shared = ctx._registered.get(name) if share else None
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
                q.enqueue_write_buffer(buf, _as_host(graph.values[name].data, buf))
        q.finish()
        if share:
            self._warn_unbound(ctx, source)

    def _warn_unbound(self, ctx: Context, source: Graph) -> None:
        """Registered values that a parameter of the model was meant to use but the compiled
        graph cannot: converted to another precision (float_dtype) or folded into other
        weights. The function computes with its own copy, so say that updates to the
        registered value will not reach it."""
        missed = sorted(n for n in ctx._registered if n in source.params and n not in self.shared)
        shaped = [n for n in missed if ctx._registered[n].shape != source.values[n].shape]
        if shaped:
            warnings.warn(
                f"compiled graph '{self.graph.name}' does not bind registered value(s) "
                + ", ".join(
                    f"{n!r} (registered {list(ctx._registered[n].shape)}, the model's "
                    f"parameter {list(source.values[n].shape)})"
                    for n in shaped
                )
                + ": the shapes differ, so this function uses its own copy of the parameter",
                stacklevel=4,
            )
            missed = [n for n in missed if n not in shaped]
        if missed:
            warnings.warn(
                f"compiled graph '{self.graph.name}' does not bind registered value(s) "
                f"{', '.join(map(repr, missed))}: the compile changed the parameter's dtype "
                f"(float_dtype={self.options['float_dtype']}) or folded it into other weights, "
                "so this function uses its own copy and later updates to the registered "
                "value do not reach it",
                stacklevel=4,
            )

    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)

    def allocate_input_proxy(self, name: str) -> TensorProxy:
        """The device tensor an input is read from, to fill with `load_from`."""
        if name not in self.graph.inputs:
            raise InvalidArgumentError(
                f"no input {name!r}; the inputs are {', '.join(self.graph.inputs)}"
            )
        return TensorProxy(self.ctx.queue, self.lowered.bindings[name])

    def __call__(self, inputs: Mapping[str, Any] | None = None) -> dict[str, TensorProxy]:
        """Run once. Inputs not given keep what their proxies hold. The outputs are proxies
        of this function's output buffers: the next call (or save_binary) overwrites them."""
        if inputs is not None and not isinstance(inputs, Mapping):
            raise InvalidArgumentError(
                f"call inputs must be a dict of input name -> array, not {type(inputs).__name__}"
            )
        inputs = dict(inputs or {})
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
                _as_array(name, data)
                continue
            q.enqueue_write_buffer(buf, _call_input(name, data, buf))
        q.enqueue_program(self.lowered.program, self.lowered.bindings)
        return {name: TensorProxy(q, self.lowered.bindings[name]) for name in self.graph.outputs}

    def reference(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's reference outputs (goldens.reference: onnxruntime for an ONNX model
        when installed, else the graph run in double precision), which the compile checks
        the compiled result against when it saves a binary."""
        return goldens.reference(self, inputs)[1]

    def report(self, phases: list[dict]) -> dict:
        """Compile phases, one entry per layer (node) with its modelled device cost, and
        totals per kernel: report.json of codegen_dir."""
        plan = self.lowered.program._plan(self.lowered.bindings)
        layers: list[dict] = []
        per_op: dict[str, dict] = {}
        for node, step in zip(self.graph.nodes, plan.steps):
            m = step.modelled
            layers.append(
                {
                    "name": node.name,
                    "op": node.op,
                    "outputs": [self.graph.values[o].describe() for o in node.outputs],
                    "flops": m.flops,
                    "device_time_s": m.time_s,
                    "bound": m.bound,
                }
            )
            total = per_op.setdefault(node.op, {"count": 0, "flops": 0.0, "device_time_s": 0.0})
            total["count"] += 1
            total["flops"] += m.flops
            total["device_time_s"] += m.time_s
        totals = plan.modelled
        return {
            "name": self.graph.name,
            "options": self.options.to_json(),
            "phases": phases,
            "layers": layers,
            "perf": per_op,
            "memory": {
                "peak_live_bytes": peak_live_bytes(self.graph),
                "buffers": self.lowered.distinct_buffers,
                "on_chip": placement.summary(self.graph, self.options["sram_budget"]),
            },
            "layout": {
                "planner": self.options["layout_planner"],
                **layout.summary(
                    self.graph, self.options["layout_spec"], self.options["gemm_layout_spec"]
                ),
            },
            "total": {
                "flops": totals.flops,
                "device_time_s": totals.time_s,
                "energy_j": totals.energy_j,
            },
        }

    def write_codegen_dir(
        self, folder: str | os.PathLike, phases: list[dict], what: str = "codegen_dir"
    ) -> None:
        """option.json (usable as option_json), l3ir.txt (the graph as scheduled, one node a
        line), report.json, model.mnlb, and the graph and inputs for load_codegen_dir."""
        folder = _make_dir(Path(folder), what)
        if self.options.envs.get("CODEGEN_DEBUG", "0") not in ("", "0"):
            # CODEGEN_DEBUG (an option_json env): the graph after every compile phase.
            for i, (phase, dump) in enumerate(self.stages):
                write_atomically(folder / f"debug_{i:02d}_{phase}.txt", (dump + "\n").encode())
        start = time.perf_counter()
        accuracy = self._save(folder / "model.mnlb")
        if accuracy is None:  # an earlier compile's binary must not pass for this one's
            _remove_stale(folder / "model.mnlb", what)
        status = "ok" if accuracy is not None else f"skipped: {_CAPTURE_RUNNING}"
        seconds = time.perf_counter() - start
        binary = {"name": "light binary", "status": status, "seconds": seconds}
        phases = [*phases, {**binary, "accuracy": accuracy} if accuracy else binary]
        try:
            options = json.dumps(self.options.to_json(), indent=1)
            write_atomically(folder / "option.json", options.encode())
            write_atomically(folder / "l3ir.txt", (self.graph.dump() + "\n").encode())
            serialize.save(self.graph, folder, "graph")
            serialize.save_arrays(folder / "inputs.npz", self.example_inputs)
            self._export_onnx(folder / "model.onnx", phases, required=False)
            report = json.dumps(self.report(phases), indent=1)
            write_atomically(folder / "report.json", report.encode())
        except MnrtError as e:
            raise InvalidArgumentError(f"{what} {folder}: {e}") from None
        except OSError as e:
            raise InvalidArgumentError(
                f"{what} {folder}: cannot write {Path(e.filename or '').name or 'a file'} "
                f"({e.strerror or e}); give a writable directory with room to spare"
            ) from None

    def _export_onnx(self, path: Path, phases: list[dict], required: bool) -> None:
        """The optimised graph as ONNX. In codegen_dir it is written when it can be (the
        report says why not, otherwise); for out_onnx the user asked for it: errors raise."""
        from .onnx_export import save

        start = time.perf_counter()
        try:
            save(self.graph, path)
            status = "ok"
        except InvalidArgumentError as e:
            if required:
                raise
            status = f"skipped: {e}"
        except OSError as e:
            if required:
                raise InvalidArgumentError(
                    f"out_onnx {path}: cannot write it ({e.strerror or e}); give a writable "
                    "file path"
                ) from None
            status = f"skipped: {e}"
        if status != "ok" and not required:  # an earlier compile's model.onnx is not this one
            _remove_stale(path, "codegen_dir")
        phases.append({"name": "onnx export", "status": status,
                       "seconds": time.perf_counter() - start})  # fmt: skip

    def save_binary(
        self, path: str | os.PathLike, inputs: Mapping[str, np.ndarray] | None = None
    ) -> None:
        """Record one run (weights, program, inputs) into a light binary whose goldens are
        the run's own results, with the tolerance model's bounds (compiler/goldens.py); the
        results are checked against `reference` too, and a miss warns. The function's inputs
        hold afterwards what they held before: a later call that gives none still uses them
        (its outputs, like any call's, are overwritten)."""
        if self._save(path, inputs) is None:
            raise CaptureError(
                f"cannot save_binary: {_CAPTURE_RUNNING}; call save_binary after end_capture()"
            )

    def _save(
        self, path: str | os.PathLike, inputs: Mapping[str, np.ndarray] | None = None
    ) -> dict | None:
        """save_binary; its accuracy check (goldens.accuracy) for report.json, or None when a
        capture (of the user's) is running."""
        if inputs is None:
            inputs = self.example_inputs
        else:  # the reference needs every input, as the replay will
            inputs = _input_arrays(self.graph, inputs, "save_binary")
        # Outside the lock, so that other compiles need not wait for it, and unobserved: a
        # capture of the user's may be running, and this is none of its business.
        with observe.unobserved():
            source, expected = goldens.reference(self, inputs)
        q = self.ctx.queue
        description = f"compiled graph {self.graph.name}"
        owner = f"compiled graph '{self.graph.name}' is recording its light binary"
        held = None  # what the inputs hold, put back once the capture has ended, however
        with _recording:
            try:
                with capture_if_idle(path, False, description, owner) as recording:
                    if not recording:
                        return None
                    with observe.unobserved():
                        held = {
                            name: (buf, TensorProxy(q, buf).cpu())
                            for name in self.graph.inputs
                            if (buf := self.lowered.bindings.get(name)) is not None
                        }
                    self(inputs)
                    results = goldens.record_goldens(self, q)
            finally:
                if held is not None:  # before another thread records: none of its business
                    with observe.unobserved():
                        _put_back(q, held)
        return goldens.accuracy(self, results, source, expected)


def _remove_stale(path: Path, what: str) -> None:
    """Remove a file an earlier compile left (never a directory: that is not one)."""
    try:
        if not path.is_dir():
            path.unlink(missing_ok=True)
    except OSError as e:
        raise InvalidArgumentError(
            f"{what} {path.parent}: cannot remove the stale {path.name} ({e.strerror or e}); "
            "give a writable directory"
        ) from None


def _put_back(q: CommandQueue, held: dict[str, tuple[Buffer, np.ndarray]]) -> None:
    for buf, data in held.values():
        q.enqueue_write_buffer(buf, _as_host(data, buf))
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
_CAPTURE_RUNNING = "a capture is running, and recording the light binary takes a capture of its own"


class Context:
    """A compile-and-run session on one emulated device."""

    def __init__(self, device: MNDevice | None = None) -> None:
        if device is not None and not isinstance(device, MNDevice):
            raise InvalidArgumentError(
                f"Context takes mnrt.MNDevice('mncore2:auto' or 'mncore2:<index>'), not "
                f"{type(device).__name__} {device!r}"
            )
        self.mn_device = device or MNDevice()
        self.device: Device = open_device(self.mn_device.index)
        self.queue = self.device.command_queue(0)
        self._registered: dict[str, TensorProxy] = {}
        self.last_compile_s = 0.0

    def register_param(self, name: str, array: np.ndarray, dtype: Any = None) -> TensorProxy:
        """Put a tensor on the device once; graphs compiled later bind their parameter of
        that name (and shape and dtype) to it instead of uploading their own copy."""
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"register_param: name must be a string, got {name!r}")
        array = _as_array(name, array)
        buf = self.device.create_buffer(
            array.shape, dtype if dtype is not None else array.dtype, name=name
        )
        proxy = TensorProxy(self.queue, buf)
        proxy.load_from(array)
        self._registered[name] = proxy
        return proxy

    def get_registered_value_proxy(self, name: str) -> TensorProxy:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"registered value names are strings, got {name!r}")
        try:
            return self._registered[name]
        except KeyError:
            known = ", ".join(self._registered) or "none"
            raise InvalidArgumentError(
                f"no registered value {name!r}; registered: {known}"
            ) from None

    def compile(
        self,
        model: Graph | GraphBuilder | Any,
        inputs: Mapping[str, np.ndarray],
        codegen_dir: str | os.PathLike | None = None,
        options: Mapping[str, Any] | None = None,
        cache_options: CacheOptions | None = None,
    ) -> CompiledFunction:
        start = time.perf_counter()
        _check_paths(codegen_dir, cache_options)
        graph, onnx_model = _graph_of(model)
        phases = [{"name": "import", "status": "ok", "seconds": time.perf_counter() - start}]
        inputs = _input_arrays(graph, inputs)
        opts = resolve(options)
        cached = None
        if cache_options is not None:
            cached = cache_options.cache_dir / _cache_key(graph, opts, inputs)
            compiled = self._load_cached(cached)
            if compiled is not None:
                # What the entry cannot know: this compile's model, options and inputs
                # (the goldens of save_binary come from them).
                compiled.source, compiled.onnx_model, compiled.options = graph, onnx_model, opts
                compiled.example_inputs = {k: np.array(v) for k, v in inputs.items()}
                if codegen_dir is not None:
                    compiled.write_codegen_dir(codegen_dir, phases)
                if opts["out_onnx"]:
                    compiled._export_onnx(Path(opts["out_onnx"]), phases, required=True)
                self.last_compile_s = time.perf_counter() - start
                return compiled
        optimised = graph
        stages = [("import", graph.dump())]  # the graph after each phase, for CODEGEN_DEBUG
        for name, step in _steps(opts):
            t0 = time.perf_counter()
            optimised = step(optimised)
            phases.append({"name": name, "status": "ok", "seconds": time.perf_counter() - t0})
            stages.append((name, optimised.dump()))
        t0 = time.perf_counter()
        compiled = CompiledFunction(self, optimised, opts, graph, inputs)
        compiled.onnx_model = onnx_model
        compiled.stages = stages
        phases.append({"name": "lower", "status": "ok", "seconds": time.perf_counter() - t0})
        if codegen_dir is not None:
            compiled.write_codegen_dir(codegen_dir, list(phases))
        if cached is not None:
            _store_cached(compiled, cached, phases)
        if opts["out_onnx"]:
            compiled._export_onnx(Path(opts["out_onnx"]), phases, required=True)
        self.last_compile_s = time.perf_counter() - start
        return compiled

    def load_codegen_dir(self, path: str | os.PathLike) -> CompiledFunction:
        """A compiled graph from a codegen_dir, without compiling it again."""
        folder = Path(path)
        opts = resolve({"option_json": str(folder / "option.json")})
        graph = serialize.load(folder, "graph")
        shapes = {name: graph.values[name].shape for name in graph.inputs}
        try:
            inputs = serialize.read_arrays(folder / "inputs.npz", shapes)
        except (MnrtError, OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise InvalidArgumentError(f"{folder} has no readable inputs.npz: {e}") from None
        return CompiledFunction(self, graph, opts, graph, inputs)

    def _load_cached(self, entry: Path) -> CompiledFunction | None:
        """The compiled graph a cache entry holds; None when there is none, or when it cannot
        be trusted (a file changed since it was stored, or unreadable): that entry is
        compiled again."""
        if not entry.is_dir() or not _checksums_hold(entry):
            return None
        try:
            return self.load_codegen_dir(entry)
        except MnrtError:
            return None

    def close(self) -> None:
        self.device.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _steps(opts: CompileOptions) -> list[tuple[str, Callable[[Graph], Graph]]]:
    """The compile phases the options ask for, in order, each with its name for the report."""
    # Widening to double is exact, so it goes first: what the passes fold (weights
    # transformed at compile time) is then computed in double too, not in float.
    widen_first = opts["float_dtype"] == "double"
    float_dtype = ("float_dtype", lambda g: apply_float_dtype(g, opts["float_dtype"]))
    steps = [float_dtype] if widen_first else []
    steps += [(step.__name__, step) for step in PIPELINES.get(opts.name, PIPELINES["O1"])]
    steps += [] if widen_first else [float_dtype]
    steps += [(step.__name__, step) for step in AFTER_FLOAT_DTYPE.get(opts.name, ())]
    steps.append(
        ("schedule", lambda g: schedule(g, opts["scheduler"], opts["sa_expected_run_iters"]))
    )
    steps.append(("placement", lambda g: placement.place(g, opts["sram_budget"])))
    steps.append(
        (
            "layout",
            lambda g: layout.assign_layouts(
                g, opts["layout_planner"], opts["layout_spec"], opts["gemm_layout_spec"]
            ),
        )
    )
    return steps


def _cache_key(graph: Graph, opts: CompileOptions, inputs: Mapping[str, np.ndarray]) -> str:
    """The cache entry of a compile: the model (structure and weights), every resolved option
    (an option_json file's contents included), the input shapes, and the mnrt version, whose
    passes and formats made the entry."""
    key = xxhash.xxh3_64(serialize.fingerprint(graph).encode())
    key.update(json.dumps(opts.to_json(), sort_keys=True).encode())
    key.update(repr(sorted((n, np.shape(a)) for n, a in inputs.items())).encode())
    key.update(f"mnrt {__version__}".encode())
    return key.hexdigest()


CHECKSUMS = "checksums.json"  # in a cache entry: file name -> xxh3-128 of its bytes


def _digest(path: Path) -> str:
    """xxh3-128 of a regular file (a FIFO or device planted in an entry is refused, not
    waited on or read forever)."""
    with open_regular(path, "a cache file") as f:
        return xxhash.xxh3_128_hexdigest(f.read())


def _checksums_hold(entry: Path) -> bool:
    """Whether a cache entry holds exactly the files it was stored with, each as it was
    stored. A file that still parses but changed (a flipped digit in graph.json, an edited
    option.json) would otherwise load as a different program, silently; one added since is
    not what was stored either, and a listed name outside the entry is never read."""
    try:
        with open_regular(entry / CHECKSUMS, "a cache file") as f:
            listed = json.loads(f.read())
        return (
            isinstance(listed, dict)
            and set(listed) == {p.name for p in entry.iterdir()} - {CHECKSUMS}
            and {"graph.json", "graph.params.npz", "option.json", "inputs.npz"} <= set(listed)
            and all(_digest(entry / name) == want for name, want in listed.items())
        )
    except (OSError, ValueError, TypeError, RecursionError, MnrtError):  # deep JSON: Recursion
        return False


def _store_cached(compiled: CompiledFunction, entry: Path, phases: list[dict]) -> None:
    """Write a cache entry whole or not at all: into a private folder renamed into place, so
    that a compile killed midway, or another compiling the same key at the same time, never
    leaves a partial entry for a later compile to load. A read-only cache (one shared by a
    team, filled by a build job) still serves what it holds: a miss compiles, warns and
    stores nothing."""
    if entry.parent.is_dir() and not os.access(entry.parent, os.W_OK | os.X_OK):
        warnings.warn(
            f"cache directory {entry.parent} is not writable, so this compile was not "
            "stored; compiles of the same model and options will compile again",
            stacklevel=3,
        )
        return
    _make_dir(entry.parent, "cache directory")
    staging = entry.parent / f".{entry.name}.{uuid.uuid4().hex}.tmp"
    try:
        compiled.write_codegen_dir(staging, list(phases), "cache directory")
        checksums = {p.name: _digest(p) for p in sorted(staging.iterdir()) if p.is_file()}
        (staging / CHECKSUMS).write_text(json.dumps(checksums, indent=1))
        # Replace what is there: one that could not be loaded, or a valid one a concurrent
        # compile of the same key stored (the same program, so either will do). If such a
        # compile stores its entry between the removal and the rename, the rename fails
        # and that entry stays.
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:  # a file or link where the entry goes would block it for good
            with contextlib.suppress(OSError):
                entry.unlink()
        with contextlib.suppress(OSError):
            os.rename(staging, entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_paths(codegen_dir: Any, cache_options: Any) -> None:
    """The argument types, before any work: a wrong one would only fail after compiling."""
    if codegen_dir is not None and not isinstance(codegen_dir, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"codegen_dir takes a directory path, not {type(codegen_dir).__name__}"
        )
    for what, path in (("codegen_dir", codegen_dir), ("cache directory", cache_options)):
        if path is not None and "\0" in str(getattr(path, "cache_dir", path)):
            raise InvalidArgumentError(f"{what} {str(path)!r}: a path cannot hold a NUL")
    if cache_options is not None and not isinstance(cache_options, CacheOptions):
        raise InvalidArgumentError(
            f"cache_options takes mnrt.CacheOptions(directory), not {type(cache_options).__name__}"
        )


def _graph_of(model: Any) -> tuple[Graph, Any]:
    """The graph to compile, and the ONNX model it came from (None for Python graphs)."""
    if isinstance(model, GraphBuilder):
        return model.build(), None
    if isinstance(model, Graph):
        model.verify()
        return model, None
    if isinstance(model, (str, os.PathLike)) or type(model).__name__ == "ModelProto":
        from .onnx_frontend import from_onnx, load_model

        if isinstance(model, (str, os.PathLike)):
            model = load_model(model)
        return from_onnx(model), model
    raise InvalidArgumentError(
        "compile takes a Graph, a GraphBuilder, or an ONNX model or path, "
        f"not {type(model).__name__}"
    )
