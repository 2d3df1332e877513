"""Time slicing: a value larger than the chip's local memory is processed in time slices.

A value of B bytes takes ceil(B / (PEs x LM per PE)) slices along a time axis: the chip
holds one slice at a time and the kernels touching it run once per slice. MLSDK's
`CODEGEN_MAX_TIME_SLICE` (an option_json env or the environment; default 256) bounds that
count: a value needing more is an error naming it and what to do, not a program that would
stream for ever. report.json gives how many values are sliced and the most slices of one.
"""

from __future__ import annotations

import math
import os

from ..device.spec import MNCORE2, DeviceSpec
from ..errors import InvalidArgumentError
from .ir import Graph
from .liveness import value_nbytes

DEFAULT_MAX_TIME_SLICE = 256


class TimeSliceError(InvalidArgumentError):
    """A value needs more time slices than CODEGEN_MAX_TIME_SLICE allows."""


def max_time_slice(envs: dict[str, str]) -> int:
    text = envs.get("CODEGEN_MAX_TIME_SLICE", os.environ.get("CODEGEN_MAX_TIME_SLICE", ""))
    if not text:
        return DEFAULT_MAX_TIME_SLICE
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise TimeSliceError(
            f"CODEGEN_MAX_TIME_SLICE={text!r}: give a whole number of slices, 1 or more "
            f"(default {DEFAULT_MAX_TIME_SLICE})"
        )
    return value


def slices(graph: Graph, spec: DeviceSpec = MNCORE2) -> dict[str, int]:
    """Time slices of every value that does not fit the chip's local memory at once."""
    lm = spec.pe_count * spec.lm_bytes_per_pe
    out = {}
    for name in graph.values:
        n = math.ceil(value_nbytes(graph, name) / lm)
        if n > 1:
            out[name] = n
    return out


def check(graph: Graph, limit: int, spec: DeviceSpec = MNCORE2) -> Graph:
    """The graph, unchanged, when no value needs more than `limit` time slices."""
    over = {n: s for n, s in slices(graph, spec).items() if s > limit}
    if over:
        name, most = max(over.items(), key=lambda kv: kv[1])
        raise TimeSliceError(
            f"value {name!r} ({value_nbytes(graph, name)} bytes) needs {most} time slices of "
            f"the chip's local memory, more than CODEGEN_MAX_TIME_SLICE={limit}"
            + (f" ({len(over) - 1} other values too)" if len(over) > 1 else "")
            + "; raise CODEGEN_MAX_TIME_SLICE in the option_json envs or make the value smaller"
        )
    return graph


def summary(graph: Graph, limit: int, spec: DeviceSpec = MNCORE2) -> dict:
    found = slices(graph, spec)
    return {
        "max_time_slice": limit,
        "sliced_values": len(found),
        "most_slices": max(found.values(), default=1),
    }
