"""Modelled device time of the nodes a stage holds: the device cost model's own figure for
each kernel on its operands (the one a run reports), so stages balanced by it are balanced
in the modelled timeline."""

from __future__ import annotations

from collections.abc import Mapping

from ...device.cost import model_call
from ...device.kernels import TensorSpec, lookup
from ...device.spec import MNCORE2, DeviceSpec
from ..ir import Node, Value


def node_time(node: Node, values: Mapping[str, Value], spec: DeviceSpec = MNCORE2) -> float:
    ins = [TensorSpec(values[n].shape, values[n].dtype) for n in node.inputs]
    outs = [TensorSpec(values[n].shape, values[n].dtype) for n in node.outputs]
    cost = lookup(node.op).cost(ins, outs, node.attrs)
    return model_call(spec, cost, ins, outs, node.attrs.get("onchip", ())).time_s
