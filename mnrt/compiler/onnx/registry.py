"""The one registry of op converters: ONNX op type -> converter. `ops/__init__.py` fills it
with one `register` line per op; nothing else adds to it."""

from __future__ import annotations

from .state import Converter

CONVERTERS: dict[str, Converter] = {}


def register(op_type: str, converter: Converter) -> None:
    """Make `converter` the importer of ONNX op `op_type` (default domain)."""
    if op_type in CONVERTERS:
        raise ValueError(f"ONNX op {op_type} has two converters")
    CONVERTERS[op_type] = converter


def supported_ops() -> list[str]:
    """The ONNX op types the frontend converts (some only for some attributes or dtypes)."""
    from . import ops  # noqa: F401  (fills CONVERTERS)

    return sorted(CONVERTERS)
