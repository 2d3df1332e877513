"""The emulated MN-Core 2 backend: memory, kernel execution and modelled cost.

This is the whole interface the host layer uses, kept small so that another backend
(a GPU one, say) is one more file: allocate/free/view memory, run one bound kernel, and say
what a kernel or a transfer costs on the modelled device.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xxhash

from ..errors import DeviceExecutionError, KernelAttributeError, UseAfterFreeError
from . import cost as cost_model
from . import mapping, parallel
from .dtypes import DType
from .host_pages import keep_freed_pages
from .kernels import KernelDef, Out, TensorSpec
from .memory import DeviceMemory
from .spec import MNCORE2, DeviceSpec


class EmulatedDevice:
    """One emulated MN-Core 2 board."""

    def __init__(self, index: int, name: str, spec: DeviceSpec = MNCORE2) -> None:
        self.index = index
        self.name = name
        self.spec = spec
        self.memory = DeviceMemory(spec.dram_bytes, spec.dram_alignment)
        keep_freed_pages()
        parallel.threads()  # a bad MNRT_THREADS is reported here, not by the first kernel

    # --- memory -------------------------------------------------------------------
    def allocate(self, shape: tuple[int, ...], dtype: DType, what: str) -> int:
        """Reserve DRAM for an array and return its address; no host memory is used until
        `storage` is first asked for it."""
        return self.memory.reserve(math.prod(shape) * dtype.itemsize, what)

    def storage(self, address: int, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
        """A storage-dtype view of an allocation's host memory, made on first use and not
        yet holding the fill (see `fill_in`)."""
        return self.memory.backing(address).view(dtype.storage).reshape(shape)

    def fill_in(self, bits: np.ndarray, address: int) -> None:
        """Put the fill into an allocation's storage view: its own array, so the fill
        cannot land in another allocation made at the same address meanwhile."""
        self.memory.fill.apply(bits.reshape(-1).view(np.uint8), address)

    def free(self, address: int) -> None:
        self.memory.free(address)

    # --- cost ---------------------------------------------------------------------
    def kernel_cost(
        self,
        kdef: KernelDef,
        ins: Sequence[TensorSpec | None],
        outs: Sequence[TensorSpec],
        attrs: Mapping[str, Any],
    ) -> cost_model.Modelled:
        try:
            return mapping.model_kernel_call(self.spec, kdef, ins, outs, attrs)
        except ValueError as e:
            raise KernelAttributeError(f"kernel '{kdef.name}': {e}") from None

    def transfer_cost(self, nbytes: int) -> cost_model.Modelled:
        return cost_model.model_transfer(self.spec, nbytes)

    # --- execution ---------------------------------------------------------------
    @staticmethod
    def bind(
        kdef: KernelDef,
        attrs: Mapping[str, Any],
        ins: Sequence[tuple[np.ndarray, DType] | None],
        outs: Sequence[tuple[np.ndarray, DType]],
    ) -> BoundKernel:
        """A kernel bound to storage views, ready to run any number of times."""
        return BoundKernel(kdef, attrs, ins, outs)

    @classmethod
    def execute(
        cls,
        kdef: KernelDef,
        attrs: Mapping[str, Any],
        ins: Sequence[tuple[np.ndarray, DType] | None],
        outs: Sequence[tuple[np.ndarray, DType]],
    ) -> None:
        """Bind and run once."""
        cls.bind(kdef, attrs, ins, outs).run()


class Scratch:
    """Arrays for widened operands (half and float16 compute in float32), keyed by role,
    position, shape and dtype, so a large half kernel writes into memory that is
    already mapped instead of faulting in fresh pages on every run.

    Widened inputs are also reused while the stored bits are unchanged: each is keyed by an
    xxh3-128 digest of the bits (tens of microseconds per MiB, against about a millisecond
    to decode), so weights that are read again and again are decoded once, and the cache
    can never return values for bits that differ from the ones it decoded."""

    limit = 1 << 30  # bytes kept before the arena starts over

    def __init__(self) -> None:
        self.arrays: dict[tuple, np.ndarray] = {}
        self.digests: dict[tuple, int] = {}
        self.nbytes = 0

    def get(self, key: tuple, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        arr = self.arrays.get(key)
        if arr is None:
            size = math.prod(shape) * dtype.itemsize
            if self.nbytes + size > self.limit:
                self.arrays.clear()
                self.digests.clear()
                self.nbytes = 0
            arr = self.arrays[key] = np.empty(shape, dtype)
            self.nbytes += size
        return arr

    def widen(self, key: tuple, bits: np.ndarray, d: DType) -> np.ndarray:
        arr = self.get(key, bits.shape, d.compute)
        digest = xxhash.xxh3_128_intdigest(np.ascontiguousarray(bits))
        if self.digests.get(key) != digest:
            arr.flags.writeable = True
            d.load(bits, arr)
            arr.flags.writeable = False  # kernels must not change inputs the cache reuses
            self.digests[key] = digest
        return arr


_current = threading.local()


def use_scratch(scratch: Scratch | None) -> Scratch | None:
    """Make the kernels this thread runs widen into `scratch` (None: a scratch of the
    thread's own); returns the one in use before. A command queue has one scratch, used by
    whichever thread runs its commands, so a weight is decoded once per queue, not once per
    thread that happens to run it."""
    before = getattr(_current, "scratch", None)
    _current.scratch = scratch
    return before


def _scratch() -> Scratch:
    scratch = getattr(_current, "scratch", None)
    if scratch is None:
        scratch = _current.scratch = Scratch()
    return scratch


class BoundKernel:
    """One kernel on fixed storage views. Everything that does not depend on the data is
    worked out here, once, so `run()` is the kernel's numpy work and little else."""

    __slots__ = (
        "attrs",
        "compute",
        "empty",
        "kdef",
        "loads",
        "noted",
        "outs",
        "targets",
        "values",
        "widened",
    )

    def __init__(
        self,
        kdef: KernelDef,
        attrs: Mapping[str, Any],
        ins: Sequence[tuple[np.ndarray, DType] | None],
        outs: Sequence[tuple[np.ndarray, DType]],
    ) -> None:
        self.kdef = kdef
        self.compute = kdef.compute
        self.attrs = attrs
        # Inputs stored as computed are passed as views; others (half, float16) are widened
        # into scratch on every run, since their bits may change between runs.
        self.values = [x[0] if x is not None and x[1].direct else None for x in ins]
        self.loads = [
            (i, x[0], x[1]) for i, x in enumerate(ins) if x is not None and not x[1].direct
        ]
        # Outputs stored as computed are written in place; others get a scratch target
        # that the store then rounds into the buffer.
        self.targets = [Out(bits.shape, d, bits if d.direct else None) for bits, d in outs]
        self.widened = [j for j, (_, d) in enumerate(outs) if not d.direct]
        self.outs = list(outs)
        # Every output empty: nothing to compute. A kernel sizes its temporaries by its
        # operands' dimensions (trilu's row and column indices), and an empty operand's
        # other dimensions may be 2**31 (see host/device.py `extent_bytes`): gigabytes of
        # temporaries for no element at all.
        self.empty = bool(outs) and all(bits.size == 0 for bits, _ in outs)
        # What a KernelWatch worked out once about this kernel (views of its outputs'
        # storage, say), for every later run to reuse; dropped on release with the views.
        self.noted: Any = None

    def release(self) -> None:
        """Let go of the storage views (one of the buffers was freed, and a record of a
        past run may keep this kernel): running it afterwards raises."""
        self.values, self.loads, self.targets, self.widened, self.outs = [], [], [], [], []
        self.noted, self.empty = None, False
        self.compute = functools.partial(_released, self.kdef.name)

    def run(self) -> Sequence[np.ndarray]:
        """Load (widen) inputs, compute, round and store; returns the outputs as computed
        (before rounding to a narrower stored dtype), for whoever watches kernels.
        Floating-point exceptions are the caller's to silence (queue workers ignore them:
        the device has no traps)."""
        if self.empty:
            return [bits for bits, _ in self.outs]
        values, targets = self.values, self.targets
        if self.loads:
            scratch = _scratch()
            values = list(values)
            for i, bits, d in self.loads:
                values[i] = scratch.widen(("in", i, bits.shape, d), bits, d)
        if self.widened:
            scratch = _scratch()
            targets = list(targets)
            for j in self.widened:
                shape, d, _ = targets[j]
                targets[j] = Out(shape, d, scratch.get(("out", j, shape, d), shape, d.compute))
        results = self.compute(values, self.attrs, targets)
        for (bits, d), result in zip(self.outs, results):
            if result is bits:
                continue
            if result.shape != bits.shape:
                raise DeviceExecutionError(
                    f"kernel '{self.kdef.name}' produced shape {np.shape(result)} for an "
                    f"output of shape {bits.shape} (a kernel bug; please report it)"
                )
            d.store(bits, result)
        return results


def _released(name: str, *args: Any) -> Any:
    raise UseAfterFreeError(
        f"kernel '{name}' is bound to a buffer that was deallocated; bind live buffers"
    )
