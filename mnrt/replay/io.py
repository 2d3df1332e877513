"""A binary's inputs and outputs on replay: checking the lists a binary records, and the
arrays a caller gives for them (`replay(inputs=..., expected=...)`, `mnrt run --input
NAME=x.npy --expected NAME=y.npy`).

New inputs replace every recorded write of their buffers; expected arrays are compared
with the last value each output buffer held when the host read (or checked) it. The checks
here run before anything executes, so a wrong name, shape or dtype costs no replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device.dtypes import BY_CODE, DType
from ..errors import DTypeError, InvalidArgumentError, InvalidBinaryError, ShapeError
from ..format.io import IoBuffer, derive

if TYPE_CHECKING:
    from .plan import Plan


def check_lists(plan: Plan) -> None:
    """The binary's recorded input and output lists hold each buffer once, and only buffers
    it creates: an input one that some command writes, an output one that some command
    reads or checks."""
    binary = plan.binary
    if not binary.io_recorded:
        return  # derived from the commands: right by construction
    used = derive(binary.commands)
    for kind, ids, among in zip(("input", "output"), binary.io_ids, used):
        if len(set(ids)) < len(ids):
            twice = next(g for g in ids if ids.count(g) > 1)
            raise InvalidBinaryError(f"buffer id {twice} is listed as an {kind} twice")
        for gid in ids:
            if gid not in plan.buffers:
                raise InvalidBinaryError(
                    f"buffer id {gid} is listed as an {kind}, but no command creates it"
                )
            if gid not in among:
                verb = "writes" if kind == "input" else "reads or checks"
                raise InvalidBinaryError(
                    f"buffer id {gid} is listed as an {kind}, but no command {verb} it"
                )


def _spec(shape: tuple[int, ...], code: int) -> str:
    dtype = BY_CODE.get(code)
    return f"{dtype.name if dtype else f'dtype code {code}'}{list(shape)}"


def describe(entries: list[IoBuffer]) -> str:
    """'x float[64, 256], w half[256, 10]': names with shapes and dtypes, for messages."""
    return ", ".join(f"{e.name} {_spec(e.shape, e.dtype)}" for e in entries) or "none"


def _takes(dtype: DType) -> str:
    return str(dtype.host) if dtype.host is not None else "float16, float32 or float64"


def _arrays(
    what: str, kind: str, given: Any, entries: list[IoBuffer]
) -> dict[int, tuple[IoBuffer, DType, np.ndarray]]:
    """`given` checked against the binary's `entries` (its inputs or outputs: `kind`), by
    buffer id; `what` names one given array in messages."""
    if not isinstance(given, Mapping):
        raise InvalidArgumentError(
            f"{what}s must map names to numpy arrays, got {type(given).__name__}"
        )
    by_name = {e.name: e for e in entries}
    unknown = [n for n in given if n not in by_name]
    if unknown:
        raise InvalidArgumentError(
            f"{', '.join(map(repr, unknown))} {'is not an' if len(unknown) == 1 else 'are not'} "
            f"{kind}{'' if len(unknown) == 1 else 's'} of the binary; its {kind}s are "
            f"{describe(entries)}"
        )
    chosen = {}
    for name, array in given.items():
        e = by_name[name]
        dtype = BY_CODE[e.dtype]
        if not isinstance(array, np.ndarray):
            raise InvalidArgumentError(
                f"{what} '{name}' must be a numpy array, got {type(array).__name__}"
            )
        if array.shape != e.shape:
            raise ShapeError(
                f"{what} '{name}' has shape {array.shape}; the binary's buffer has shape {e.shape}"
            )
        if not dtype.accepts(array):
            raise DTypeError(
                f"{what} '{name}' is an array of {array.dtype}; the binary's buffer is "
                f"{dtype.name} and takes {_takes(dtype)}: cast it with .astype()"
            )
        chosen[e.buffer_id] = (e, dtype, np.ascontiguousarray(array))
    return chosen


def new_inputs(plan: Plan, given: Any) -> dict[int, np.ndarray]:
    """Replacement data by buffer id, as the device stores it."""
    return {
        gid: dtype.to_storage(array)
        for gid, (_, dtype, array) in _arrays("input", "input", given, plan.binary.inputs).items()
    }


def expected_outputs(plan: Plan, given: Any) -> dict[int, np.ndarray]:
    """Expected values by buffer id, as a read of the buffer returns them (rounded to the
    device's half for a half buffer, as a recorded golden is)."""
    return {
        gid: dtype.from_storage(dtype.to_storage(array)) if dtype.is_half else array
        for gid, (_, dtype, array) in _arrays(
            "expected output", "output", given, plan.binary.outputs
        ).items()
    }
