"""Kernel attribute values as FlatBuffers `Attribute` tables, and back.

Attribute kinds are the kernel registry's vocabulary ("int", "float", ...); this is the one
table that ties them to the schema's AttrKind values.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidBinaryError
from .fb.Attribute import AttributeT
from .fb.AttrKind import AttrKind
from .text import decoded

ATTR_KINDS = {
    "int": AttrKind.Int,
    "float": AttrKind.Float,
    "bool": AttrKind.Bool,
    "str": AttrKind.String,
    "ints": AttrKind.Ints,
    "floats": AttrKind.Floats,
}


def attribute(name: str, kind: str, value: Any) -> AttributeT:
    a = AttributeT(name=name, kind=ATTR_KINDS[kind])
    if kind in ("int", "bool"):
        a.i = int(value)
    elif kind == "float":
        a.f = float(value)
    elif kind == "str":
        a.s = str(value)
    elif kind == "ints":
        a.ints = [int(v) for v in value]
    else:
        a.floats = [float(v) for v in value]
    return a


def attribute_value(a: AttributeT, command: int | None = None) -> tuple[str, Any]:
    """(name, value) of a decoded attribute."""
    name = decoded(a.name)
    kind = a.kind
    if kind == AttrKind.Int:
        return name, int(a.i)
    if kind == AttrKind.Bool:
        return name, bool(a.i)
    if kind == AttrKind.Float:
        return name, float(a.f)
    if kind == AttrKind.String:
        return name, decoded(a.s)
    if kind == AttrKind.Ints:
        return name, tuple(int(v) for v in (a.ints if a.ints is not None else ()))
    if kind == AttrKind.Floats:
        return name, tuple(float(v) for v in (a.floats if a.floats is not None else ()))
    raise InvalidBinaryError(f"attribute '{name}' has invalid kind {kind}", command=command)
