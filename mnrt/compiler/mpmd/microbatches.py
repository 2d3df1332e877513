"""A pipelined compile's inputs: one microbatch's example of each, or every microbatch's
along a leading axis, as the call takes them. One rule for the compile, the CLI's --input
and save_binary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import ShapeError


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
        if name not in ranks or rank_of(data) != ranks[name] + 1:
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
    examples: Mapping[str, Any], runs: Mapping[str, np.ndarray], microbatches: int
) -> dict[str, np.ndarray]:
    """Each input with a leading microbatch axis: its run where `split_microbatches` found
    one (in the example's dtype), else its example repeated."""
    out = {}
    for k, v in examples.items():
        v = np.asarray(v)
        out[k] = np.asarray(runs[k], v.dtype) if k in runs else np.repeat(v[None], microbatches, 0)
    return out


def rank_of(data: Any) -> int | None:
    """The number of axes of data given for an input; None for what is no array (a ragged
    list), which the input checks then name."""
    try:
        return np.ndim(data)
    except ValueError:
        return None
