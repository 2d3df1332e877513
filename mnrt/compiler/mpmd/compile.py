"""A pipelined compile: the optimised graph of one microbatch partitioned into an MPMD
program, the passes (PIPELINE), the schedule, and the program on its devices."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import ShapeError
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


def split_microbatches(
    ranks: Mapping[str, int], inputs: Mapping[str, Any], microbatches: int
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(examples, runs) of a pipelined compile's inputs: one with one axis more than the
    model declares for it (`ranks`) holds every microbatch's input along its first axis, as
    a pipelined call takes it; its first is the compile's example, and the function's
    example run (what save_binary records) is all of them. One of the declared rank is one
    microbatch's example, repeated for each (see `every_microbatch`)."""
    examples, runs = dict(inputs), {}
    for name, data in inputs.items():
        if name not in ranks or np.ndim(data) != ranks[name] + 1:
            continue
        array = np.asarray(data)
        if array.shape[0] != microbatches:
            raise ShapeError(
                f"input {name} of shape {array.shape} holds {array.shape[0]} microbatches "
                f"along its first axis; the pipeline runs {microbatches}: give {microbatches}, "
                f"or one microbatch's example of shape {array.shape[1:]}"
            )
        examples[name], runs[name] = array[0], array
    return examples, runs


def every_microbatch(
    examples: Mapping[str, np.ndarray], runs: Mapping[str, np.ndarray], microbatches: int
) -> dict[str, np.ndarray]:
    """Each input with a leading microbatch axis: its run where `split_microbatches` found
    one (in the example's dtype), else its example repeated."""
    return {
        k: np.asarray(runs[k], v.dtype) if k in runs else np.repeat(v[None], microbatches, 0)
        for k, v in examples.items()
    }


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
