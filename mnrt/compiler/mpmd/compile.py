"""A pipelined compile: the optimised graph of one microbatch partitioned into an MPMD
program, the passes (PIPELINE), the schedule, and the program on its devices."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir import Graph
from ..options import CompileOptions
from .compiled import PipelinedFunction
from .options import parse_assignment, parse_mpmd
from .partition import partition
from .passes import run_pipeline
from .schedule import plan
from .text import dump

if TYPE_CHECKING:
    from ..context import Context


def compile_pipelined(
    ctx: Context,
    graph: Graph,
    opts: CompileOptions,
    inputs: Mapping[str, np.ndarray],
    phases: list[dict[str, Any]],
) -> PipelinedFunction:
    """`graph` (optimised) as a pipeline; each step timed into `phases`. `inputs` are its
    example run, each with a leading microbatch axis. The function's `passes` holds (pass,
    IR text) after the import and after every pass."""
    mpmd = parse_mpmd(opts["mpmd"])
    assignment = parse_assignment(opts["stage_assignment"]) if opts["stage_assignment"] else {}
    t0 = time.perf_counter()
    program = partition(graph, mpmd, assignment)
    after = [("import", program)]
    phases.append({"name": "mpmd import", "status": "ok", "seconds": time.perf_counter() - t0})
    t0 = time.perf_counter()
    after += run_pipeline(program)
    program = after[-1][1]
    phases.append({"name": "mpmd passes", "status": "ok", "seconds": time.perf_counter() - t0})
    t0 = time.perf_counter()
    schedule = plan(program, mpmd.devices, mpmd.stages, mpmd.schedule, mpmd.microbatches)
    phases.append({"name": "mpmd schedule", "status": "ok", "seconds": time.perf_counter() - t0})
    t0 = time.perf_counter()
    compiled = PipelinedFunction(ctx, program, schedule, mpmd, opts, graph, inputs)
    compiled.passes = [(name, dump(p)) for name, p in after]
    phases.append({"name": "lower", "status": "ok", "seconds": time.perf_counter() - t0})
    return compiled
