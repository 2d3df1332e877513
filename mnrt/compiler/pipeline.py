"""The compile pipeline: the graph a model gives, and the passes, scheduling (order and
placement), mapping and layout steps the options ask for, in order.

A step takes a graph and gives one; a step may also give (graph, account), whose account
report.json shows in that step's phase (the scheduler's does)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidArgumentError
from . import placement, schedulers, time_slice
from .builder import GraphBuilder
from .cast_motion import cancel_round_trip_casts, narrow_moves
from .chain_fusion import fuse_chains, fuse_matrix_chains
from .ir import Graph
from .layout_planners import plan_layouts
from .map_graph import map_graph
from .options import CompileOptions
from .passes import (
    apply_float_dtype,
    common_subexpressions,
    dead_code,
    fold_constants,
    fold_scale_shift,
    fuse_epilogues,
    fuse_scale_shift,
    merge_scale_shifts,
)
from .patterns import fuse_gelu, fuse_layernorm, fuse_rolls, fuse_silu
from .precision import half_where_it_pays, narrow_where_it_pays, products_write_float
from .views import elide_copies

Step = Callable[[Graph], "Graph | tuple[Graph, dict]"]

# O1's passes: an inference BatchNormalization folded into the conv or gemm before it, as
# onnxruntime's basic level folds it, so that the default compile runs no kernel that only
# rescales a product; a norm no matrix kernel absorbs (DenseNet's, ahead of its convs) is
# one scale_shift kernel however many Mul and Add the model writes.
_FOLDING = (dead_code, fold_constants, merge_scale_shifts, fold_scale_shift, fuse_scale_shift)

# O2's passes; O3 and O4 drop what fusing left unused as well. fuse_scale_shift comes after
# the patterns, whose Mul and Add it would take (a LayerNormalization's scale and bias),
# and before fuse_epilogues, which gives a scale_shift the activation after it.
_FUSING = (dead_code, fold_constants, common_subexpressions, fuse_rolls, merge_scale_shifts,
           fold_scale_shift, fuse_silu, fuse_gelu, fuse_layernorm, fuse_scale_shift,
           fuse_epilogues)  # fmt: skip

# Passes each preset runs after float_dtype, on the casts it inserted. At O2 a widening
# moves past the kernels that only move values, to cancel against the narrowing before the
# next conv, and on through concatenations and max poolings where the timing model prices
# that lower (narrow_where_it_pays: an Inception block's, not DenseNet's, where it would
# cost a widening kernel a layer). At O3 and up the chains take casts in as steps, with no
# DRAM round trip, so a widening moves only past the kernels that compute nothing, and
# into concatenations (narrow_moves): slices of narrow values are views, where a slice of
# a widened one was a chain that narrowed it again. At O2 a region of half kernels
# stays half only where that pays for its casts, and a half product that only a widening
# reads stores its float accumulator (precision.py); at O3 both measured slower, the chains
# taking the casts in.
AFTER_FLOAT_DTYPE = {
    "O2": (common_subexpressions, narrow_where_it_pays, half_where_it_pays, products_write_float),
    "O3": (common_subexpressions, narrow_moves, cancel_round_trip_casts, fuse_chains),
    "O4": (common_subexpressions, narrow_moves, cancel_round_trip_casts, fuse_chains),
}

# Passes that weigh a choice by what its kernels will cost once mapped, and take the
# options' mapping_effort for it.
PRICED = (narrow_where_it_pays, half_where_it_pays)

# Passes each preset runs after mapping and layout planning, on the kernels they chose;
# from O1, a concatenation or reshape whose operands can share a buffer runs no kernel.
AFTER_LAYOUT = {
    "O1": (elide_copies,),
    "O2": (elide_copies,),
    "O3": (fuse_matrix_chains, elide_copies),
    "O4": (fuse_matrix_chains, elide_copies),
}

# Passes each preset runs, in order (after float_dtype is applied at the end).
PIPELINES = {
    "O0": (),
    "O1": _FOLDING,
    "O2": _FUSING,
    "O3": (*_FUSING, dead_code),
    "O4": (*_FUSING, dead_code),
    "debug": (),
}


def steps(opts: CompileOptions) -> list[tuple[str, Step]]:
    """The compile phases the options ask for, in order, each with its name for the report."""
    # Widening to double is exact, so it goes first: what the passes fold (weights
    # transformed at compile time) is then computed in double too, not in float.
    widen_first = opts["float_dtype"] == "double"
    float_dtype = ("float_dtype", lambda g: apply_float_dtype(g, opts["float_dtype"]))
    steps = [float_dtype] if widen_first else []
    steps += [(step.__name__, step) for step in PIPELINES.get(opts.name, PIPELINES["O1"])]
    steps += [] if widen_first else [float_dtype]
    effort = opts["mapping_effort"]
    for step in AFTER_FLOAT_DTYPE.get(opts.name, ()):
        run = functools.partial(step, effort=effort) if step in PRICED else step
        steps.append((step.__name__, run))
    request = schedulers.request(opts["sram_budget"], opts["sa_expected_run_iters"], opts.envs)

    def schedule(g: Graph) -> tuple[Graph, dict]:
        done = schedulers.schedule(g, opts["scheduler"], request)
        return done.graph, done.account

    steps.append(("schedule", schedule))
    steps.append(("mapping", lambda g: map_graph(g, opts["mapping_effort"])))
    limit = time_slice.max_time_slice(opts.envs)
    steps.append(("time_slice", lambda g: time_slice.check(g, limit)))
    steps.append(
        (
            "layout",
            lambda g: plan_layouts(
                g,
                opts["layout_planner"],
                opts["layout_spec"],
                opts["gemm_layout_spec"],
                opts["mapping_effort"],
                sram_budget=opts["sram_budget"],
            ),
        )
    )
    steps += [(step.__name__, step) for step in AFTER_LAYOUT.get(opts.name, ())]
    steps.append(("chain_room", lambda g: placement.chain_room(g, opts["sram_budget"])))
    return steps


def optimise(
    graph: Graph, opts: CompileOptions, phases: list[dict]
) -> tuple[Graph, list[tuple[str, str]]]:
    """Run the steps on `graph`, each timed into `phases`; returns the graph they give and
    (phase, graph dump) after each, which CODEGEN_DEBUG writes to the codegen_dir."""
    stages = [("import", graph.dump())]
    for name, step in steps(opts):
        t0 = time.perf_counter()
        result = step(graph)
        graph, account = result if isinstance(result, tuple) else (result, None)
        phase = {"name": name, "status": "ok", "seconds": time.perf_counter() - t0}
        phases.append({**phase, "account": account} if account else phase)
        stages.append((name, graph.dump()))
    return graph, stages


def loaded(model: Any) -> Any:
    """`model` as graph_of takes it, an ONNX file read (once: declared_ranks reads it too)."""
    if isinstance(model, (str, os.PathLike)):
        from .onnx import load_model

        return load_model(model)
    return model


def declared_ranks(model: Any) -> dict[str, int]:
    """The rank each input of a `loaded` model declares, of the inputs that declare one."""
    if isinstance(model, (Graph, GraphBuilder)):
        graph = model.graph if isinstance(model, GraphBuilder) else model
        return {name: len(graph.values[name].shape) for name in graph.inputs}
    if type(model).__name__ != "ModelProto":
        return {}
    return {
        i.name: len(i.type.tensor_type.shape.dim)
        for i in model.graph.input
        if i.type.HasField("tensor_type") and i.type.tensor_type.HasField("shape")
    }


def graph_of(model: Any, inputs: Any = None) -> tuple[Graph, Any]:
    """The graph to compile, and the ONNX model it came from (None for Python graphs).
    An ONNX model's example `inputs` fix its symbolic dimensions and fold the inputs that
    ops need at import time (axes, pads, shapes) into constants."""
    if isinstance(model, GraphBuilder):
        return model.build(), None
    if isinstance(model, Graph):
        model.verify()
        return model, None
    if isinstance(model, (str, os.PathLike)) or type(model).__name__ == "ModelProto":
        from .onnx import from_onnx

        model = loaded(model)
        return from_onnx(model, inputs if isinstance(inputs, Mapping) else None), model
    raise InvalidArgumentError(
        "compile takes a Graph, a GraphBuilder, or an ONNX model or path, "
        f"not {type(model).__name__}"
    )
