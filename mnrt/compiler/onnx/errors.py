"""The frontend's errors: the two a user sees, the two a converter raises for one node
(collected over the whole model so that one error lists every problem), and the signal to
import again with more example inputs taken as constants."""

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


class NeedsExamples(Exception):
    """A value a converter needs at import time was computed on the device from graph inputs
    that example inputs give (a CenterCropPad's pads from its `shape` input): import again
    with those inputs taken as constants from the start (`inputs`)."""

    def __init__(self, inputs: frozenset[str], message: str) -> None:
        super().__init__(message)
        self.inputs = inputs


class ForcedInputRead(Exception):
    """An input taken as a constant for NeedsExamples is read by device kernels as well: a
    call could not pass it, so import again taking none, and refuse the node that needed
    the value as before."""
