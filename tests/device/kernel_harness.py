"""The helpers every kernel test module drives kernels with.

`run` does what the host layer does for one kernel launch: check attributes and arity,
infer the outputs, then call `EmulatedDevice.execute` on storage-dtype arrays (the real
load / compute / round-and-store path). Output buffers start as garbage, so a kernel that
leaves elements unwritten fails, and every launch also checks the kernel's cost.
"""

from __future__ import annotations

import math

import numpy as np

from mnrt.device import dtypes as dt
from mnrt.device.emulator import EmulatedDevice
from mnrt.device.kernels import Cost, TensorSpec, lookup
from mnrt.device.kernels.registry import OutSpec

Operand = tuple[np.ndarray, dt.DType]


def operand(x, dtype: str | dt.DType | None = None) -> Operand:
    """Host values as a device operand: storage bits and dtype ('half' rounds to 1-6-9)."""
    x = np.asarray(x)
    d = dt.dtype(dtype if dtype is not None else x.dtype)
    return d.to_storage(np.asarray(x, dtype=d.read_dtype)), d


def spec(shape: tuple[int, ...], dtype: str = "float") -> TensorSpec:
    return TensorSpec(tuple(shape), dt.dtype(dtype))


def infer(name: str, *ins: TensorSpec | None, **attrs) -> list[OutSpec]:
    """What a program build checks: attributes, arity, then the kernel's infer."""
    kdef = lookup(name)
    checked = kdef.check_attrs(attrs)
    kdef.check_arity(len(ins), len(kdef.outputs))
    return kdef.infer(list(ins), checked)


def check_cost(cost: Cost) -> None:
    for field in ("flops", "dram_bytes", "sram_bytes", "l2bm_bytes", "lm_bytes"):
        value = getattr(cost, field)
        assert math.isfinite(value) and value >= 0, f"{field} = {value}"
    assert cost.parallel >= 0


def run(name: str, *ins: Operand | None, out_dtype: str | None = None, **attrs) -> np.ndarray:
    """Launch one kernel; return its single output as host values (half reads as float32)."""
    (y,) = run_all(name, *ins, out_dtypes=None if out_dtype is None else [out_dtype], **attrs)
    return y


def run_all(
    name: str, *ins: Operand | None, out_dtypes: list[str] | None = None, **attrs
) -> list[np.ndarray]:
    """Launch one kernel; return every output as host values, in order."""
    kdef = lookup(name)
    checked = kdef.check_attrs(attrs)
    specs = [None if x is None else TensorSpec(x[0].shape, x[1]) for x in ins]
    kdef.check_arity(len(ins), len(kdef.outputs))
    out_specs = kdef.infer(specs, checked)
    outs = []
    for i, out_spec in enumerate(out_specs):
        d = out_spec.dtypes[0] if out_dtypes is None else dt.dtype(out_dtypes[i])
        assert d in out_spec.dtypes, f"{name} cannot write {d.name}"
        nbytes = math.prod(out_spec.shape) * d.itemsize
        bits = np.full(nbytes, 0xA5, np.uint8).view(d.storage).reshape(out_spec.shape)
        outs.append((bits, d))
    check_cost(kdef.cost(specs, [TensorSpec(b.shape, d) for b, d in outs], checked))
    with np.errstate(all="ignore"):  # as the queue workers run kernels: no traps
        EmulatedDevice.execute(kdef, checked, ins, outs)
    return [d.from_storage(bits) for bits, d in outs]


def onnx_reference(op_type: str, *inputs: np.ndarray, n_outputs: int = 1, **attrs) -> list:
    """The outputs of one ONNX node as ONNX's own reference evaluator computes them (the
    definition the node tests check against); needs the onnx package."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    return ReferenceEvaluator(node).run(None, dict(zip(names, inputs, strict=True)))
