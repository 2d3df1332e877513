"""Modelled device time of MPMD work: the device cost model's own figure for each kernel
(the one a run reports), for balancing stages by node and for the pipeline's timeline by
lowered program."""

from __future__ import annotations

from collections.abc import Mapping

from ...device.cost import Modelled
from ...device.kernels import TensorSpec, lookup
from ...device.mapping import model_kernel_call
from ...device.spec import MNCORE2, DeviceSpec
from ...host import Buffer, Program
from ...host.program import view_specs
from ..ir import Node, Value


def _kernel(
    op: str, ins: list[TensorSpec], outs: list[TensorSpec], attrs: Mapping, spec: DeviceSpec
) -> Modelled:
    return model_kernel_call(spec, lookup(op), ins, outs, attrs)


def node_time(node: Node, values: Mapping[str, Value], spec: DeviceSpec = MNCORE2) -> float:
    ins = [TensorSpec(values[n].shape, values[n].dtype) for n in node.inputs]
    outs = [TensorSpec(values[n].shape, values[n].dtype) for n in node.outputs]
    return _kernel(node.op, ins, outs, node.attrs, spec).time_s


def program_cost(
    program: Program, bindings: Mapping[str, Buffer], spec: DeviceSpec = MNCORE2
) -> Modelled:
    """What running `program` on `bindings` costs, kernel by kernel (as the device prices
    it when it runs)."""
    time_s = energy_j = flops = dram = 0.0
    specs = {n: TensorSpec(b.shape, b.dtype) for n, b in bindings.items()}
    specs.update(view_specs(program.name, program.views, specs))  # the slots that are views
    for k in program.kernels:
        ins = [specs[n] for n in k.inputs]
        outs = [specs[n] for n in k.outputs]
        m = _kernel(k.op, ins, outs, k.attrs, spec)
        time_s += m.time_s
        energy_j += m.energy_j
        flops += m.flops
        dram += m.dram_bytes
    return Modelled(time_s, energy_j, flops, dram, "compute")
