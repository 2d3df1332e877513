"""A binary's inputs and outputs on replay: checking the lists a binary records, and the
arrays a caller gives for them (`replay(inputs=..., expected=...)`, `mnrt run --input
NAME=x.npy --expected NAME=y.npy`).

New inputs replace every recorded write of their buffers; expected arrays are compared
with the last value each output buffer held when the host read (or checked) it. The checks
here run before anything executes, so a wrong name, shape or dtype costs no replay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device.dtypes import BY_CODE, DType
from ..errors import DTypeError, InvalidArgumentError, InvalidBinaryError, ShapeError
from ..format import LightBinary
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
    used = [set(ids) for ids in derive(binary.commands)]
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
    """'x float[64, 256], w half[256, 10]': names with shapes and dtypes, for messages and
    `mnrt info`. A pipelined compile's microbatches are one item, with the array that
    fills them all: 'x#0..7 float[2, 3] (one x float[8, 2, 3] fills them)'."""
    by_name = {e.name: e for e in entries}
    firsts, rest = {}, set()
    for stem, members in families(list(by_name)).items():
        es = [by_name[m] for m in members]
        if len(es) > 1 and _alike([(e.shape, e.dtype) for e in es]):
            firsts[members[0]] = stem, len(es)
            rest.update(members[1:])
    items = []
    for e in entries:
        spec = _spec(e.shape, e.dtype)
        if e.name in firsts:
            stem, n = firsts[e.name]
            whole = _spec((n, *e.shape), e.dtype)
            items.append(f"{e.name}..{n - 1} {spec} (one {stem} {whole} fills them)")
        elif e.name not in rest:
            items.append(f"{e.name} {spec}")
    return ", ".join(items) or "none"


def _takes(dtype: DType) -> str:
    return str(dtype.host) if dtype.host is not None else "float16, float32 or float64"


_WHAT = {"input": "input", "output": "expected output"}  # one given array, in messages


def _named(kind: str, name: str, entries: list[IoBuffer]) -> IoBuffer | None:
    """The entry named `name`, or else the one whose name is `name` after a prefix ending
    in a dot (a compiled graph's buffers are named "graph.value", and its users know the
    model's own names: "x" for "mlp.x"); None where no entry has the name."""
    for e in entries:
        if e.name == name:
            return e
    suffixed = [e for e in entries if e.name.endswith(f".{name}")]
    if len(suffixed) == 1:
        return suffixed[0]
    if suffixed:
        raise InvalidArgumentError(
            f"{name!r} could be the {kind} {' or '.join(repr(e.name) for e in suffixed)} of "
            "the binary; give its whole name"
        )
    return None


def _resolve(kind: str, name: str, entries: list[IoBuffer]) -> list[IoBuffer] | IoBuffer:
    """What an array given for `name` fills: the entry `_named` finds, or, where no entry
    has the name, the list of the microbatches of a pipelined compile's input or output
    (`name#0`, `name#1`, ...: one array, microbatches along its first axis, fills them)."""
    found = _named(kind, name, entries)
    if found is not None:
        return found
    family = []
    while (e := _named(kind, f"{name}#{len(family)}", entries)) is not None:
        family.append(e)
    if family and _alike([(e.shape, e.dtype) for e in family]):
        return family
    raise InvalidArgumentError(
        f"{name!r} is not an {kind} of the binary; its {kind}s are {describe(entries)}"
    )


def families(names: list[str]) -> dict[str, list[str]]:
    """The microbatch families among `names`: {"y": ["y#0", "y#1"]} where "y#0", "y#1"
    are names and "y" is not (the names `_resolve` lets one array fill), in order."""
    taken = set(names)
    out: dict[str, list[str]] = {}
    for name in names:
        stem, sep, m = name.rpartition("#")
        if sep and m == "0" and stem and stem not in taken and stem not in out:
            family = [name]
            while (member := f"{stem}#{len(family)}") in taken:
                family.append(member)
            out[stem] = family
    return out


def _alike(specs: list[tuple]) -> bool:
    """Whether the members of a family share one (shape, dtype): one array can hold them."""
    return len(set(specs)) <= 1


def stacked(outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each microbatch family of `outputs` whose arrays share a shape and dtype as one array,
    microbatches along its first axis: the form `--input` and `--expected` take, so a
    pipelined binary's saved output can be given back as it is."""
    out = {}
    for stem, members in families(list(outputs)).items():
        arrays = [outputs[m] for m in members]
        if _alike([(a.shape, a.dtype) for a in arrays]):
            out[stem] = np.stack(arrays)
    return out


def _check_specs(
    kind: str, es: list[IoBuffer] | IoBuffer, shape: tuple[int, ...], dtype: np.dtype
) -> DType:
    """`_check_spec` for what one array fills (see `_resolve`)."""
    if not isinstance(es, list):
        return _check_spec(kind, es, shape, dtype)
    first, last = es[0].name, es[-1].name
    name = first.rpartition("#")[0]
    if shape[:1] != (len(es),):
        whole = (len(es), *es[0].shape)
        which = (
            f"{len(es)} microbatches {first} .. {last}" if len(es) > 1 else f"microbatch {first}"
        )
        raise ShapeError(
            f"{_WHAT[kind]} '{name}' has shape {shape}; the binary has it as {which} of shape "
            f"{es[0].shape}: give an array of shape {whole}, or one per microbatch ({first}=...)"
        )
    return _check_spec(kind, es[0], shape[1:], dtype, name)


def _check_spec(
    kind: str, e: IoBuffer, shape: tuple[int, ...], dtype: np.dtype, name: str | None = None
) -> DType:
    """The buffer's dtype, once `shape` and `dtype` (of a given array, `name` in messages:
    the entry's own by default) are found to fit it."""
    buffer_dtype = BY_CODE[e.dtype]
    name = e.name if name is None else name
    if shape != e.shape:
        raise ShapeError(
            f"{_WHAT[kind]} '{name}' has shape {shape}; the binary's buffer has shape {e.shape}"
        )
    comparable = kind == "output" and _comparable(buffer_dtype, dtype)
    if not (comparable or buffer_dtype.accepts(np.empty(0, dtype))):
        raise DTypeError(
            f"{_WHAT[kind]} '{name}' is an array of {dtype}; the binary's buffer is "
            f"{buffer_dtype.name} and takes {_takes(buffer_dtype)}: cast it with .astype()"
        )
    return buffer_dtype


def _comparable(buffer_dtype: DType, dtype: np.dtype) -> bool:
    """Whether an expected output of `dtype` is compared with a buffer of `buffer_dtype`
    although a write would refuse it: floats with floats and integers with integers, in
    any width (a check compares in float64, or exactly for integers: a float64 reference
    of a float output need not be rounded to float32 first)."""
    host = buffer_dtype.host
    if host is None:
        return False
    return dtype.kind == host.kind == "f" or (dtype.kind in "iu" and host.kind in "iu")


def _entries(binary: LightBinary, kind: str) -> list[IoBuffer]:
    return binary.inputs if kind == "input" else binary.outputs


def header_check(
    binary: LightBinary, kind: str, name: str
) -> Callable[[tuple[int, ...], np.dtype], None]:
    """For a file's header, before its data is read: the same checks `replay` makes of an
    array given for input (kind "input") or expected output (kind "output") `name`."""
    es = _resolve(kind, name, _entries(binary, kind))

    def check(shape: tuple[int, ...], dtype: np.dtype) -> None:
        _check_specs(kind, es, shape, dtype)

    return check


def _arrays(kind: str, given: Any, binary: LightBinary) -> dict[int, tuple[DType, np.ndarray]]:
    """`given` (arrays by name) checked against the binary's inputs or outputs (`kind`),
    by buffer id."""
    if not isinstance(given, Mapping):
        raise InvalidArgumentError(
            f"{_WHAT[kind]}s must map names to numpy arrays, got {type(given).__name__}"
        )
    entries = _entries(binary, kind)
    chosen = {}
    for name, array in given.items():
        es = _resolve(kind, name, entries)
        if not isinstance(array, np.ndarray):
            raise InvalidArgumentError(
                f"{_WHAT[kind]} '{name}' must be a numpy array, got {type(array).__name__}"
            )
        dtype = _check_specs(kind, es, array.shape, array.dtype)
        pairs = zip(es, array, strict=True) if isinstance(es, list) else [(es, array)]
        for e, part in pairs:
            if e.buffer_id in chosen:
                raise InvalidArgumentError(f"{_WHAT[kind]} '{e.name}' is given twice")
            chosen[e.buffer_id] = (dtype, np.ascontiguousarray(part))
    return chosen


def new_inputs(plan: Plan, given: Any) -> dict[int, np.ndarray]:
    """Replacement data by buffer id, as the device stores it."""
    return {
        gid: dtype.to_storage(a) for gid, (dtype, a) in _arrays("input", given, plan.binary).items()
    }


def expected_outputs(plan: Plan, given: Any) -> dict[int, np.ndarray]:
    """Expected values by buffer id, as a read of the buffer returns them (rounded to the
    device's half for a half buffer, as a recorded golden is)."""
    return {
        gid: dtype.from_storage(dtype.to_storage(a)) if dtype.is_half else a
        for gid, (dtype, a) in _arrays("output", given, plan.binary).items()
    }
