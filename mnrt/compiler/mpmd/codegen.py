"""The codegen_dir of a pipelined compile: option.json, l3ir.txt and model.onnx (the
optimised graph of one microbatch), that graph, its weights and its example run (every
microbatch's inputs) as load_codegen_dir reads them (graph.json, graph.params.npz,
inputs.npz), mpmd/NN_<pass>.txt (the MPMD IR after the import and after each pass),
model.mnlb (a captured pipelined run, multi-device) and report.json (fragments, transfers,
the schedule per device, the modelled timeline against the analytic bubble, and the
binary's check against the model's reference in its "light binary" phase)."""

from __future__ import annotations

import os
from pathlib import Path

from ...format.files import write_atomically
from ..codegen import make_dir, write_compiled
from .compiled import PipelinedFunction
from .schedule import analytic_bubble


def report(compiled: PipelinedFunction, phases: list[dict]) -> dict:
    mpmd = compiled.mpmd
    timeline = compiled.timeline()
    return {
        "name": compiled.program.name,
        "options": compiled.options.to_json(),
        "phases": phases,
        "mpmd": mpmd.to_json(),
        "fragments": [
            {
                "name": f.name,
                "stage": f.stage,
                "device": f.device,
                "origin": list(f.origin),
                "ops": [n.name or n.op for n in f.ops],
                "inputs": f.inputs,
                "outputs": f.outputs,
            }
            for f in compiled.fragments
        ],
        "transfers": [
            {
                "name": t.name,
                "value": t.source,
                "src": t.src,
                "dst": t.dst,
                "nbytes": compiled.nbytes(t.source),
            }
            for t in compiled.transfers
        ],
        "schedule": {
            str(d): [[t.stage, t.microbatch] for t in tasks]
            for d, tasks in compiled.plan.per_device.items()
        },
        "modelled": timeline.to_dict(),
        "analytic_bubble_fraction": analytic_bubble(
            mpmd.schedule, len(mpmd.devices), mpmd.stages, mpmd.microbatches
        ),
    }


def write(compiled: PipelinedFunction, folder: str | os.PathLike, phases: list[dict]) -> None:
    """Write the codegen_dir (see the module docstring). While a capture of the user's
    runs, model.mnlb is left out and report.json's "light binary" phase says why."""
    folder = make_dir(Path(folder), "codegen_dir")
    irs = make_dir(folder / "mpmd", "codegen_dir")
    for i, (name, text) in enumerate(compiled.passes):
        write_atomically(irs / f"{i:02d}_{name}.txt", text.encode())
    write_compiled(compiled, folder, phases, lambda done: report(compiled, done))
