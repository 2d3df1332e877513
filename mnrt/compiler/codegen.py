"""codegen_dir: what a compile writes for people and tools to read (option.json, l3ir.txt,
report.json, model.onnx, model.mnlb) and what load_codegen_dir reads back (graph.json,
graph.params.npz, inputs.npz)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import zipfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device.mapping import Mapping as KernelMapping
from ..errors import InvalidArgumentError, MnrtError
from ..format import strict_json
from ..format.files import as_path, parse_json, write_atomically
from . import layout, placement, serialize, time_slice
from .ir import Graph
from .liveness import peak_live_bytes
from .node_cost import NOTHING
from .options import CompileOptions, resolve

if TYPE_CHECKING:
    from .compiled import CompiledFunction

CAPTURE_RUNNING = "a capture is running, and recording the light binary takes a capture of its own"


# The compiled graph as ONNX, written into every codegen_dir.
EXPORTED_MODEL = "model.onnx"
_IR_FILE = re.compile(r"\d\d_[a-z-]+\.txt")


def check_model_kept(
    model: Any, codegen_dir: str | os.PathLike | None, out_onnx: str | os.PathLike | None
) -> None:
    """Refuse to compile a model file into what the compile writes as ONNX: the codegen_dir
    that holds it as EXPORTED_MODEL (an earlier compile's export compiled into the same
    folder), or the `out_onnx` path. The export would replace the model being compiled."""
    if model_file(model) is None:
        return
    targets = [("codegen_dir", codegen_dir, Path(codegen_dir or ".") / EXPORTED_MODEL),
               ("out_onnx", out_onnx, Path(out_onnx or "."))]  # fmt: skip
    for option, given, target in targets:
        if given and target.exists() and os.path.samefile(model, target):
            raise InvalidArgumentError(
                f"{option} {given} would replace the model being compiled ({model}) with the "
                "compiled graph's ONNX; give another path, or copy the model elsewhere first"
            )


def model_file(model: Any) -> Path | None:
    """The file `model` names, when a compile was given a path: what nothing the compiled
    function writes may replace."""
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
        return Path(model)
    return None


def model_file_and_stamp(model: Any) -> tuple[Path | None, tuple[int, int] | None]:
    """`model_file(model)`, and that file's size and modification time now: whether a
    later read of the file (the reference's, from onnxruntime) reads what the compile did."""
    path = model_file(model)
    return path, None if path is None else file_stamp(path)


def file_stamp(path: Path) -> tuple[int, int] | None:
    """A file's size and modification time (ns), or None where it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def check_binary_spares_model(path: str | os.PathLike, model: Path | None) -> None:
    """Refuse a save_binary `path` that is the model file the function was compiled from:
    the binary would replace the model (which may be the user's only copy)."""
    if model is None:
        return
    try:
        same = os.path.samefile(path, model)
    except (OSError, ValueError):  # either is not there (any more), or not a path
        return
    if same:
        raise InvalidArgumentError(
            f"save_binary: {path} is the model this function was compiled from; the binary "
            "would replace it: give another path"
        )


def make_dir(folder: Path, what: str) -> Path:
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


def write(
    compiled: CompiledFunction,
    folder: str | os.PathLike,
    phases: list[dict],
    what: str = "codegen_dir",
) -> None:
    """option.json (usable as option_json), l3ir.txt (the graph as scheduled, one node a
    line), report.json, model.mnlb, and the graph and inputs for load_codegen_dir."""
    folder = make_dir(as_path(folder, what), what)
    if compiled.options.envs.get("CODEGEN_DEBUG", "0") not in ("", "0"):
        # CODEGEN_DEBUG (an option_json env): the graph after every compile phase.
        for i, (phase, dump) in enumerate(compiled.stages):
            write_atomically(folder / f"debug_{i:02d}_{phase}.txt", (dump + "\n").encode())
    _remove_stale_irs(folder, what)
    write_compiled(compiled, folder, phases, compiled.report, what)


def _remove_stale_irs(folder: Path, what: str) -> None:
    """The MPMD IR files (mpmd/NN_<pass>.txt) a pipelined compile into the same folder left:
    not this compile's. Only those files go; the folder too once empty."""
    irs = folder / "mpmd"
    if not irs.is_dir():
        return
    for path in irs.iterdir():
        if _IR_FILE.fullmatch(path.name):
            _remove_stale(path, what)
    with contextlib.suppress(OSError):  # something of the user's is there: it stays
        irs.rmdir()


def write_compiled(
    compiled: Any,
    folder: Path,
    phases: list[dict],
    report: Callable[[list[dict]], dict],
    what: str = "codegen_dir",
) -> None:
    """What every codegen_dir holds of a compiled function (single-device or pipelined):
    the graph, its weights and example inputs (`write_graph`), model.mnlb, model.onnx and
    report.json (`report(phases)`). The graph and its weights (VGG-19: 548 MB) are written
    while the binary is recorded: a thread that mostly waits for the disk, beside one that
    mostly computes. Leaving the block waits for it, whatever happens (an error of the
    binary's stands)."""
    with ThreadPoolExecutor(1, thread_name_prefix="mnrt-codegen") as writer:
        written = writer.submit(
            write_graph, compiled.graph, compiled.options, compiled.example_inputs, folder
        )
        start = time.perf_counter()
        accuracy = compiled.save_binary_and_check(folder / "model.mnlb")
        if accuracy is None:  # an earlier compile's binary must not pass for this one's
            _remove_stale(folder / "model.mnlb", what)
        seconds = time.perf_counter() - start
    status = "ok" if accuracy is not None else f"skipped: {CAPTURE_RUNNING}"
    binary = {"name": "light binary", "status": status, "seconds": seconds}
    phases = [*phases, {**binary, "accuracy": accuracy} if accuracy else binary]
    try:
        weights = written.result()
        # model.onnx's weights are those of graph.params.npz, where they lie: not a copy.
        export_onnx(
            compiled.graph,
            folder / EXPORTED_MODEL,
            phases,
            required=False,
            weights_in=("graph.params.npz", weights),
        )
        write_atomically(
            folder / "report.json", strict_json.dumps(report(phases), indent=1).encode()
        )
    except MnrtError as e:
        raise InvalidArgumentError(f"{what} {folder}: {e}") from None
    except OSError as e:
        raise InvalidArgumentError(
            f"{what} {folder}: cannot write {Path(e.filename or '').name or 'a file'} "
            f"({e.strerror or e}); give a writable directory with room to spare"
        ) from None


def write_graph(
    graph: Graph, options: CompileOptions, inputs: Mapping[str, np.ndarray], folder: Path
) -> dict[str, tuple[int, int]]:
    """option.json, l3ir.txt, the graph and its weights, and the example inputs: what
    `load` reads back; returns where each weight lies in graph.params.npz (see
    serialize.save)."""
    write_atomically(folder / "option.json", json.dumps(options.to_json(), indent=1).encode())
    write_atomically(folder / "l3ir.txt", (graph.dump() + "\n").encode())
    plan = graph.notes.get("layout_plan")
    if plan is not None:  # the layout step's history: what the dashboard's Layouts page shows
        write_atomically(folder / "layout_plan.json", json.dumps(plan, indent=1).encode())
    else:  # a loaded codegen_dir's graph has none: an older plan must not pass for it
        _remove_stale(folder / "layout_plan.json", "codegen_dir")
    weights = serialize.save(graph, folder, "graph")
    serialize.save_arrays(folder / "inputs.npz", inputs)
    return weights


def report(compiled: CompiledFunction, phases: list[dict]) -> dict:
    """Compile phases, one entry per layer (node) with its modelled device cost, and
    totals per kernel: report.json of codegen_dir. A node that runs no kernel (its
    operands share a buffer: views.py) is a layer `elided`, of no cost."""
    plan = compiled.lowered.program.plan(compiled.lowered.bindings)
    layers: list[dict] = []
    per_op: dict[str, dict] = {}
    switches = {"count": 0, "device_time_s": 0.0}
    steps = iter(plan.steps)
    for node in compiled.graph.nodes:
        elided = compiled.graph.elided(node)
        m = NOTHING if elided else next(steps).modelled
        if node.op == "relayout":
            switches["count"] += 1
            switches["device_time_s"] += m.time_s
        layers.append(
            {
                "name": node.name,
                "op": node.op,
                "outputs": [compiled.graph.values[o].describe() for o in node.outputs],
                "flops": m.flops,
                "device_time_s": m.time_s,
                "energy_j": m.energy_j,
                "bound": "none" if elided else m.bound,
                **_mapping_of(node.attrs),
                **({"elided": True} if elided else {}),
            }
        )
        if elided:
            continue
        total = per_op.setdefault(node.op, {"count": 0, "flops": 0.0, "device_time_s": 0.0})
        total["count"] += 1
        total["flops"] += m.flops
        total["device_time_s"] += m.time_s
    totals = plan.modelled
    return {
        "name": compiled.graph.name,
        "options": compiled.options.to_json(),
        "phases": phases,
        "layers": layers,
        "perf": per_op,
        "memory": {
            "peak_live_bytes": peak_live_bytes(compiled.graph),
            "buffers": compiled.lowered.distinct_buffers,
            "on_chip": placement.summary(compiled.graph, compiled.options["sram_budget"]),
        },
        "layout": {
            "planner": compiled.options["layout_planner"],
            "switches": switches["count"],
            "switch_device_time_s": switches["device_time_s"],
            **layout.summary(
                compiled.graph,
                compiled.options["layout_spec"],
                compiled.options["gemm_layout_spec"],
            ),
        },
        "total": {
            "flops": totals.flops,
            "device_time_s": totals.time_s,
            "energy_j": totals.energy_j,
        },
        "modelled": {"time_s": totals.time_s, "energy_j": totals.energy_j},
        "time_slices": time_slice.summary(
            compiled.graph, time_slice.max_time_slice(compiled.options.envs)
        ),
    }


def _mapping_of(attrs: Mapping) -> dict:
    """A matrix layer's mapping as text, for people reading report.json."""
    if not attrs.get("mapping"):
        return {}
    return {"mapping": str(KernelMapping.from_attr(attrs["mapping"]))}


def export_onnx(
    graph: Graph,
    path: Path,
    phases: list[dict],
    required: bool,
    weights_in: tuple[str, Mapping[str, tuple[int, int]]] | None = None,
) -> None:
    """The optimised graph as ONNX. In codegen_dir it is written when it can be (the
    report says why not, otherwise); for out_onnx the user asked for it: errors raise.
    `weights_in`: a file beside it that holds the weights (see onnx_export.save)."""
    from .onnx_export import save

    start = time.perf_counter()
    try:
        save(graph, path, weights_in)
        status = "ok"
    except InvalidArgumentError as e:
        if required:
            raise
        status = f"skipped: {e}"
    except (OSError, MnrtError) as e:  # MnrtError: the atomic write could not be made
        if required:
            reason = getattr(e, "strerror", None) or e
            raise InvalidArgumentError(
                f"out_onnx {path}: cannot write it ({reason}); give a writable file path"
            ) from None
        status = f"skipped: {e}"
    if status != "ok" and not required:  # an earlier compile's model.onnx is not this one
        _remove_stale(path, "codegen_dir")
    phases.append({"name": "onnx export", "status": status,
                   "seconds": time.perf_counter() - start})  # fmt: skip


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


def load(folder: Path) -> tuple[Graph, CompileOptions, dict[str, np.ndarray]]:
    """The graph, options and example inputs a codegen_dir holds, as load_codegen_dir
    compiles them again (no passes: the graph is the optimised one). A pipelined compile's
    inputs are its example run: each with a leading microbatch axis."""
    opts = resolve({"option_json": str(folder / "option.json")})
    graph = serialize.load(folder, "graph")
    lead: tuple[int, ...] = ()
    if opts["mpmd"]:
        from .mpmd.options import parse_mpmd

        lead = (parse_mpmd(opts["mpmd"]).microbatches,)
    shapes = {name: (*lead, *graph.values[name].shape) for name in graph.inputs}
    try:
        inputs = serialize.read_arrays(folder / "inputs.npz", shapes)
    except (MnrtError, OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InvalidArgumentError(
            f"{folder} has no readable inputs.npz ({e}); compile the model into it again"
        ) from None
    plan = folder / "layout_plan.json"
    if plan.is_file():  # the layout step's history goes with the graph it planned
        try:
            graph.notes["layout_plan"] = parse_json(plan.read_text())
        except (OSError, ValueError) as e:
            raise InvalidArgumentError(
                f"{folder}: layout_plan.json is not readable JSON ({e}); compile again"
            ) from None
    return graph, opts, inputs
