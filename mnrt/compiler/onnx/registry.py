"""The one registry of op converters: ONNX op type -> converter. `ops/__init__.py` fills it
with one `register` line per op; nothing else adds to it."""

from __future__ import annotations

from .state import Converter

CONVERTERS: dict[str, Converter] = {}


def key(domain: str, op_type: str) -> str:
    """An op's registry key: its name in the default domain, `domain:name` in another."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}:{op_type}"


def register(op_type: str, converter: Converter, domain: str = "") -> None:
    """Make `converter` the importer of ONNX op `op_type` of `domain` (default: ONNX's)."""
    k = key(domain, op_type)
    if k in CONVERTERS:
        raise ValueError(f"ONNX op {k} has two converters")
    CONVERTERS[k] = converter


def supported_ops() -> list[str]:
    """The ONNX op types the frontend converts (some only for some attributes or dtypes);
    those of another domain than ONNX's as `domain:name`."""
    from . import ops  # noqa: F401  (fills CONVERTERS)

    return sorted(CONVERTERS)
