"""The emulated MN-Core 2 backend: memory, kernel execution and modelled cost.

This is the whole interface the host layer uses, kept small so that another backend
(a GPU one, say) is one more file: allocate/free/view memory, run one bound kernel, and say
what a kernel or a transfer costs on the modelled device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import DeviceExecutionError
from . import cost as cost_model
from .dtypes import DType
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

    # --- memory -------------------------------------------------------------------
    def allocate(self, shape: tuple[int, ...], dtype: DType, what: str) -> tuple[int, np.ndarray]:
        """Reserve DRAM for an array; return (address, a storage-dtype view of it)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        address, raw = self.memory.allocate(nbytes, what)
        return address, raw.view(dtype.storage).reshape(shape)

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
        first = next((t for t in ins if t is not None), None) or outs[0]
        return cost_model.model_kernel(
            self.spec, kdef.cost(ins, outs, attrs), first.dtype.precision
        )

    def transfer_cost(self, nbytes: int) -> cost_model.Modelled:
        return cost_model.model_transfer(self.spec, nbytes)

    # --- execution ----------------------------------------------------------------
    @staticmethod
    def execute(
        kdef: KernelDef,
        attrs: Mapping[str, Any],
        ins: Sequence[np.ndarray | None],
        in_dtypes: Sequence[DType | None],
        outs: Sequence[np.ndarray],
        out_dtypes: Sequence[DType],
    ) -> None:
        """Run one kernel on storage views: load (widen) inputs, compute, round and store.

        Floating-point exceptions are the caller's to silence (queue workers ignore them,
        as the device has no traps: inf and nan propagate)."""
        values = [None if x is None else d.load(x) for x, d in zip(ins, in_dtypes)]
        targets = [Out(b.shape, d, b if d.direct else None) for b, d in zip(outs, out_dtypes)]
        results = kdef.compute(values, attrs, targets)
        for bits, d, result in zip(outs, out_dtypes, results):
            if result is bits:
                continue
            if result.shape != bits.shape:
                raise DeviceExecutionError(
                    f"kernel '{kdef.name}' produced shape {np.shape(result)} for an output of "
                    f"shape {bits.shape} (a kernel bug; please report it)"
                )
            d.store(bits, result)
