"""The frontend's errors: the two a user sees, and the two a converter raises for one node
(collected over the whole model so that one error lists every problem)."""

from __future__ import annotations

from ...errors import InvalidArgumentError


class UnsupportedModelError(InvalidArgumentError):
    """The model uses ops or attributes the device cannot run; the message lists them all."""


class InvalidModelError(InvalidArgumentError):
    """The model is not valid ONNX (or not ONNX at all); the message lists every problem."""


class Unsupported(Exception):
    """One node cannot be imported: the reason (an attribute, a mode, a rank...)."""


class Invalid(Exception):
    """One node breaks the ONNX spec: what is wrong with it (an axis, a size, a length...)."""
