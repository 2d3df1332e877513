"""A compiled function's tensors on the device (TensorProxy), and the host arrays its
inputs and outputs take: checked against the graph and converted to the buffers' dtypes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..device.dtypes import DType, host_numbers
from ..errors import InvalidArgumentError, ShapeError
from ..host import Buffer, CommandQueue
from ..user_warning import warn
from .ir import Graph


class HostArray(np.ndarray):
    """A result already on the host (a pipelined call's outputs, gathered from its last
    stage): an ndarray that also answers `.cpu()` as a TensorProxy does, so code written
    for a single-device function (`compiled(x)["y"].cpu()`) runs on a pipelined one."""

    def cpu(self) -> np.ndarray:
        """A plain ndarray copy, the caller's to keep."""
        return np.array(self)


class TensorProxy:
    """A tensor that lives on the device; `cpu()` copies it to the host.

    A compiled function's outputs are proxies of its output buffers, which its next call
    overwrites: copy a result with `cpu()` before calling again to keep it."""

    def __init__(
        self, queue: CommandQueue, buffer: Buffer, owner: object = None, wider: str = ""
    ) -> None:
        self.queue = queue
        self.buffer = buffer
        # The model's dtype for this output when float_dtype computed it narrower (a double
        # output compiled at float): a value beyond the narrower range is said, not hidden.
        self._wider = wider
        # What keeps the device open while this proxy is referenced (the compiled function,
        # and through it its Context): `ctx.compile(...)(x)["y"].cpu()` must not find the
        # device closed because the function was dropped before the read.
        self._owner = owner

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype.name

    def cpu(self) -> np.ndarray:
        data = self.queue.enqueue_read_buffer(self.buffer, blocking=True)
        if self._wider and data.dtype.kind == "f" and not np.isfinite(data).all():
            warn(
                f"output '{self.buffer.name}' holds inf or nan: the model computes it in "
                f"{self._wider}, float_dtype computed it in {self.dtype}, and a value may have "
                f"left {self.dtype}'s range; compile with float_dtype='{self._wider}' to keep it",
            )
        return data

    def load_from(self, array: np.ndarray, clone: bool = True) -> None:
        """Copy host data in. With clone=False the array is used as it is: do not change it
        until the device has read it (the next call or finish())."""
        if not isinstance(clone, bool):
            raise InvalidArgumentError(f"load_from: clone must be True or False, got {clone!r}")
        data = as_array(self.buffer.name, array, "data loaded into")
        check_shape(self.buffer.name, data, self.buffer.shape, "data loaded into")
        if clone and data is array:
            data = data.copy()
        self.queue.enqueue_write_buffer(self.buffer, as_host(data, self.buffer))

    def __repr__(self) -> str:
        return f"TensorProxy({self.buffer.name}, {self.dtype}{list(self.shape)})"


def as_host(data: np.ndarray, buf: Buffer) -> np.ndarray:
    """Host data in the dtype the buffer takes. Floats are converted to the compiled
    precision (which the user chose with float_dtype); anything else must already match."""
    host = buf.dtype.host
    if host is None:  # half: takes any float and rounds it
        return data if data.dtype.kind == "f" else data.astype(np.float32)
    if data.dtype != host and data.dtype.kind == host.kind == "f":
        # Values beyond the narrower range become infinite, as the compile warned of a
        # constant and as an output read back says: numpy's bare warning adds nothing.
        with np.errstate(over="ignore"):
            return data.astype(host)
    if data.dtype != host and data.dtype.kind in "iu" and host.kind in "iu":
        _check_int_range(data, host, buf.name)
        return data.astype(host)  # ONNX int64 indices run as the device's int32
    return data


def stored_form(data: np.ndarray, buf: Buffer) -> Callable[[], np.ndarray]:
    """What `buf` holds once `data` is written to it, worked out when asked: how a capture
    snapshots a weight its function vouches for (see capture.vouch) instead of copying
    it out of the device."""
    return lambda: buf.dtype.to_storage(as_host(data, buf))


def call_input(name: str, data: Any, buf: Buffer) -> np.ndarray:
    """An input of a call, as the buffer takes it and owned by the call: the queue writes it
    after the call has returned, when the caller may already be refilling its array."""
    array = as_array(name, data)
    check_shape(name, array, buf.shape)
    check_kind(name, array, buf.dtype)
    host = as_host(array, buf)
    return host.copy() if host is array else host


def _check_int_range(data: np.ndarray, host: np.dtype, name: str) -> None:
    """Narrowing integers (int64 to the device's int32) must not wrap around: an index of
    2**32 + 1 would silently become 1."""
    info = np.iinfo(host)
    if data.size and (data.min() < info.min or data.max() > info.max):
        raise InvalidArgumentError(
            f"{name}: integer data from {data.min()} to {data.max()} does not fit the device's "
            f"{host} [{info.min}, {info.max}] (the device has no int64); pass values in range"
        )


def as_array(name: str, data: Any, role: str = "input") -> np.ndarray:
    """Data given for a value as a numeric numpy array, or an error naming the value and
    its `role` (an input, a registered value, what a proxy loads)."""
    try:
        array = np.asarray(data)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{role} {name!r} is not an array: {e}") from None
    numbers = host_numbers(array)
    if numbers is None:
        raise InvalidArgumentError(
            f"{role} {name!r} is {type(data).__name__} of dtype {array.dtype}; "
            "pass a numeric numpy array"
        )
    return numbers


def check_mapping(inputs: Any, what: str) -> None:
    """Refuse inputs (of a call, a compile, a save_binary...) that are not a dict."""
    if not isinstance(inputs, Mapping):
        raise InvalidArgumentError(
            f"{what} inputs must be a dict of input name -> array, not {type(inputs).__name__}"
        )


def input_arrays(graph: Graph, inputs: Any, what: str = "compile") -> dict[str, np.ndarray]:
    """The inputs of a compile (or a save_binary) checked against the graph: exactly its
    input names, each a numeric array of the input's shape."""
    if inputs is None:
        inputs = {}
    check_mapping(inputs, what)
    missing = [n for n in graph.inputs if n not in inputs]
    unknown = [repr(n) for n in inputs if n not in graph.inputs]
    if missing or unknown:
        raise InvalidArgumentError(
            f"{what} inputs must be exactly {', '.join(graph.inputs) or 'none'}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(unknown)}" if unknown else "")
        )
    arrays = {name: as_array(name, inputs[name]) for name in graph.inputs}
    for name, array in arrays.items():
        value = graph.values[name]
        check_shape(name, array, value.shape)
        check_kind(name, array, value.dtype)
    return arrays


def check_shape(name: str, array: np.ndarray, shape: tuple[int, ...], role: str = "input") -> None:
    """Refuse data of another shape than the compiled one, naming the model's input (the
    queue would name its buffer, and suggest a reshape where a new compile is the fix)."""
    if array.shape != tuple(shape):
        raise ShapeError(
            f"{role} {name!r} has shape {array.shape}, the model takes {tuple(shape)} (a compile "
            "fixes every shape, symbolic dimensions too, from its example inputs: compile "
            "again for another)"
        )


def check_kind(name: str, array: np.ndarray, dtype: DType) -> None:
    """Refuse data of another kind than an input's (integers or bools for a float input),
    as onnxruntime does: float data of any width is converted to the compiled precision,
    integers of any width or sign to the device's (it has no int64)."""
    takes = np.dtype(dtype.read_dtype)
    if _kind(array.dtype) != _kind(takes):
        raise InvalidArgumentError(
            f"input {name!r} is {array.dtype}, the model takes {dtype.name} ({takes}); "
            f"cast it with .astype(np.{takes})"
        )


def _kind(dtype: np.dtype) -> str:
    return "iu" if dtype.kind in "iu" else dtype.kind
