"""ONNX optionals, resolved at import time as sequences are (ops/sequence.py): whether an
optional holds a value is known when the model is imported, and one that holds a value is
that value (a tensor or a sequence); an empty one is `state.NO_VALUE`. Optional graph
inputs and outputs are refused: the device holds tensors."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..state import NO_VALUE, Attrs, Ctx, Invalid, NoValue
from .common import optional_input


def optional(cx: Ctx, node: Any, at: Attrs) -> list:
    """An optional of the input, or an empty one (of the `type` attribute) without one."""
    at.get("type")
    name = optional_input(node, 0)
    return [NO_VALUE if name is None else cx.value(name)]


def optional_has_element(cx: Ctx, node: Any, at: Attrs) -> list:
    """Whether the input holds a value: a tensor or sequence does, an empty optional or an
    absent input does not. A constant either way (the input is not read on the device)."""
    name = optional_input(node, 0)
    return [np.array(name is not None and not isinstance(cx.held.get(name), NoValue))]


def optional_get_element(cx: Ctx, node: Any, at: Attrs) -> list:
    value = cx.value(node.input[0])
    if isinstance(value, NoValue):
        raise Invalid(f"'{node.input[0]}' is an empty optional: it has no element to get")
    return [value]
