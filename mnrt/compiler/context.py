"""The MLSDK-style entry points: MNDevice and Context (the compiled function, its tensors,
the compile pipeline, the cache and the codegen_dir each live in a module of their own).

    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    compiled = ctx.compile(graph_or_onnx, {"x": x}, options={"float_dtype": "mixed"})
    y = compiled({"x": x})["y"].cpu()

Weights are uploaded once, at compile, and stay on the device across calls. A Context owns
its emulated device: close() (or a with block) releases it, and so does dropping the last
reference to the Context (a finalizer; a compiled function refers to its Context, so the
device stays open while any of its functions is referenced).
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import DeviceClosedError, InvalidArgumentError, MnrtError
from ..format.files import as_path
from ..host import Device, internal, open_device
from . import codegen, pipeline
from .builder import GraphBuilder
from .cache import (
    CacheOptions,
    cache_key,
    checksums_hold,
    load_optimised,
    store_cached,
    store_optimised,
    stored_phases,
)
from .compiled import CompiledFunction
from .ir import Graph
from .options import resolve
from .release import Orphans
from .shared_devices import SharedDevices
from .tensors import TensorProxy, as_array, input_arrays


class MNDevice:
    """A device named as MLSDK does: "mncore2:auto" or "mncore2:<index>".

    The emulated device is opened by the Context made with it. close() (or the end of a
    with block) closes every device that Contexts opened through this MNDevice; each also
    closes when its Context is closed or dropped. Dropping the MNDevice needs nothing of
    its own: its Contexts refer to it, so by then they are gone and their devices closed."""

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
        self._devices: weakref.WeakSet[Device] = weakref.WeakSet()

    def _open(self) -> Device:
        """Open the device this names, for a Context."""
        device = open_device(self.index)
        self._devices.add(device)
        return device

    def close(self) -> None:
        """Close the devices Contexts opened through this MNDevice (see Device.close)."""
        for device in list(self._devices):
            device.close()

    def __enter__(self) -> MNDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MNDevice({self.spec!r})"


class Context:
    """A compile-and-run session on one emulated device."""

    def __init__(self, device: MNDevice | None = None) -> None:
        if device is not None and not isinstance(device, MNDevice):
            raise InvalidArgumentError(
                f"Context takes mnrt.MNDevice('mncore2:auto' or 'mncore2:<index>'), not "
                f"{type(device).__name__} {device!r}"
            )
        self.mn_device = device or MNDevice()
        self.device: Device = self.mn_device._open()
        # Dropped without close(): the device is released now, not when the cycle collector
        # reaches it (its queues and buffers point back at it).
        self._finalizer = weakref.finalize(self, internal.close_quietly, self.device)
        self.queue = self.device.command_queue(0)
        self._registered: dict[str, TensorProxy] = {}
        self._pipelined: weakref.WeakSet = weakref.WeakSet()  # functions over several devices
        self.pipeline_devices = SharedDevices()  # their devices besides this one
        # Buffers of its compiled functions dropped without close(), freed at the next
        # compile, call or close of a function (see release.py).
        self.orphans = Orphans()
        self.last_compile_s = 0.0

    def register_param(self, name: str, array: np.ndarray, dtype: Any = None) -> TensorProxy:
        """Put a tensor on the device once; graphs compiled later bind their parameter of
        that name (and shape and dtype) to it instead of uploading their own copy."""
        self._check_open("register a value")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"register_param: name must be a string, got {name!r}")
        array = as_array(name, array, "registered value")
        buf = self.device.create_buffer(
            array.shape, dtype if dtype is not None else array.dtype, name=name
        )
        proxy = TensorProxy(self.queue, buf)
        proxy.load_from(array)
        self._registered[name] = proxy
        return proxy

    @property
    def registered(self) -> Mapping[str, TensorProxy]:
        """The values `register_param` put on the device, by name (read only: register
        more with register_param)."""
        return MappingProxyType(self._registered)

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
        self._check_open("compile")
        _check_paths(codegen_dir, cache_options)
        opts = resolve(options)
        source, runs = pipeline.loaded(model), {}
        if opts["mpmd"] and isinstance(inputs, Mapping):
            from .mpmd.microbatches import split_microbatches
            from .mpmd.options import parse_mpmd

            count = parse_mpmd(opts["mpmd"]).microbatches
            inputs, runs = split_microbatches(pipeline.declared_ranks(source), inputs, count)
        graph, onnx_model = pipeline.graph_of(source, inputs)
        phases = [{"name": "import", "status": "ok", "seconds": time.perf_counter() - start}]
        folded = {}
        if onnx_model is not None and isinstance(inputs, Mapping):
            # Inputs the import folded into constants are no longer the graph's to take.
            names = {i.name for i in onnx_model.graph.input} - set(graph.inputs)
            folded = {k: np.array(v) for k, v in inputs.items() if k in names}
            inputs = {k: v for k, v in inputs.items() if k not in names}
        inputs = input_arrays(graph, inputs)
        codegen.check_model_kept(model, codegen_dir, opts["out_onnx"])
        if opts["mpmd"]:
            made = self._compile_pipelined(graph, opts, inputs, runs, phases, codegen_dir,
                                           cache_options, start)  # fmt: skip
            made.model_file, made.model_stamp = codegen.model_file_and_stamp(model)
            made.source, made.onnx_model = graph, onnx_model  # its reference's
            return made
        cached = None
        if cache_options is not None:
            cached = cache_options.cache_dir / cache_key(graph, opts, inputs)
            t0 = time.perf_counter()
            compiled = self._load_cached(cached)
            if compiled is not None:
                phases.append(_cache_phase("hit", cached, t0))
                phases += stored_phases(cached)
                # What the entry cannot know: this compile's model, options and inputs
                # (the goldens of save_binary come from them).
                compiled.source, compiled.onnx_model, compiled.options = graph, onnx_model, opts
                compiled.model_file, compiled.model_stamp = codegen.model_file_and_stamp(model)
                compiled.example_inputs = {k: np.array(v) for k, v in inputs.items()}
                compiled.folded = folded
                try:
                    if codegen_dir is not None:
                        compiled.write_codegen_dir(codegen_dir, phases)
                    if opts["out_onnx"]:
                        codegen.export_onnx(
                            compiled.graph, Path(opts["out_onnx"]), phases, required=True
                        )
                except BaseException:
                    compiled.close()
                    raise
                self.last_compile_s = time.perf_counter() - start
                return compiled
            phases.append(_cache_phase("miss", cached, t0))
        optimised, stages = pipeline.optimise(graph, opts, phases)
        t0 = time.perf_counter()
        compiled = CompiledFunction(self, optimised, opts, graph, inputs)
        compiled.onnx_model = onnx_model
        compiled.model_file, compiled.model_stamp = codegen.model_file_and_stamp(model)
        compiled.folded = folded
        compiled.stages = stages
        phases.append({"name": "lower", "status": "ok", "seconds": time.perf_counter() - t0})
        try:
            if codegen_dir is not None:
                compiled.write_codegen_dir(codegen_dir, list(phases))
            if cached is not None:
                store_cached(compiled, cached, phases)
            if opts["out_onnx"]:
                codegen.export_onnx(compiled.graph, Path(opts["out_onnx"]), phases, required=True)
        except BaseException:
            compiled.close()  # its memory, now: the caller never gets the function
            raise
        self.last_compile_s = time.perf_counter() - start
        return compiled

    def _compile_pipelined(
        self,
        graph: Graph,
        opts: Any,
        inputs: Mapping[str, np.ndarray],
        runs: Mapping[str, np.ndarray],
        phases: list[dict],
        codegen_dir: str | os.PathLike | None,
        cache_options: CacheOptions | None,
        start: float,
    ) -> Any:
        """The `mpmd` option's compile: a PipelinedFunction over its devices, whose example
        run is `runs` where given (see split_microbatches), `inputs` repeated elsewhere."""
        from .mpmd import codegen as mpmd_codegen
        from .mpmd.compile import compile_pipelined
        from .mpmd.microbatches import every_microbatch
        from .mpmd.options import parse_mpmd

        optimised, stages, cached = None, [], None
        run = every_microbatch(inputs, runs, parse_mpmd(opts["mpmd"]).microbatches)
        if cache_options is not None:  # the optimised graph: the passes are what costs
            cached = cache_options.cache_dir / cache_key(graph, opts, inputs)
            t0 = time.perf_counter()
            optimised = load_optimised(cached)
            phases.append(_cache_phase("miss" if optimised is None else "hit", cached, t0))
            if optimised is not None:
                phases += stored_phases(cached)
        if optimised is None:
            optimised, stages = pipeline.optimise(graph, opts, phases)
            if cached is not None:
                store_optimised(optimised, opts, run, cached, phases)
        compiled = compile_pipelined(self, optimised, opts, run, phases)
        self._pipelined.add(compiled)
        compiled.stages = stages
        try:
            if codegen_dir is not None:
                mpmd_codegen.write(compiled, codegen_dir, list(phases))
            if opts["out_onnx"]:
                codegen.export_onnx(optimised, Path(opts["out_onnx"]), phases, required=True)
        except BaseException:
            compiled.close()  # its devices, now: the caller never gets the function
            raise
        self.last_compile_s = time.perf_counter() - start
        return compiled

    def load_codegen_dir(self, path: str | os.PathLike) -> Any:
        """A compiled graph from a codegen_dir, without compiling it again: a
        CompiledFunction, or a PipelinedFunction for a pipelined compile's (its optimised
        graph split into the same stages again, on the same devices)."""
        self._check_open("load a codegen_dir")
        path = as_path(path, "load_codegen_dir")
        if (path / "mpmd").is_dir() and not (path / "graph.json").is_file():
            raise InvalidArgumentError(
                f"{path} holds a pipelined (mpmd) compile of an earlier mnrt, without its "
                "graph: compile the model again, or replay its model.mnlb with mnrt run"
            )
        graph, opts, inputs = codegen.load(Path(path))
        if not opts["mpmd"]:  # option.json says which compile wrote the graph
            return CompiledFunction(self, graph, opts, graph, inputs)
        from .mpmd.compile import compile_pipelined

        compiled = compile_pipelined(self, graph, opts, inputs, [])
        self._pipelined.add(compiled)
        return compiled

    def _load_cached(self, entry: Path) -> CompiledFunction | None:
        """The compiled graph a cache entry holds; None when there is none, or when it cannot
        be trusted (a file changed since it was stored, or unreadable): that entry is
        compiled again."""
        if not entry.is_dir() or not checksums_hold(entry):
            return None
        try:
            return self.load_codegen_dir(entry)
        except MnrtError:
            return None

    def _check_open(self, what: str) -> None:
        """Say so, in this object's terms, when it was closed (the device's own error would
        advise opening the device again with the host API)."""
        if not self.device.is_open:
            raise DeviceClosedError(
                f"cannot {what}: this Context was closed, which released its device; "
                "create a new mnrt.Context"
            )

    def close(self) -> None:
        """Release the device: wait for its queue, free its memory and index, and raise a
        device error not yet reported. Its compiled functions cannot run afterwards."""
        self._finalizer.detach()
        for compiled in list(self._pipelined):
            compiled.close()
        self.pipeline_devices.close()
        self.orphans.clear()
        self.device.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cache_phase(result: str, entry: Path, start: float) -> dict:
    """report.json's account of looking a compile up in the cache."""
    seconds = time.perf_counter() - start
    return {
        "name": "cache",
        "status": "ok",
        "result": result,
        "seconds": seconds,
        "entry": entry.name,
    }


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
