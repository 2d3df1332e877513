"""How the schema's fields look from Python: each scalar type's struct code and numpy
dtype, and a field's attribute name in the generated object-API classes. The writer
(pack), the reader (unpack) and the JSON form (jsonio) all work from these."""

from __future__ import annotations

import importlib

import numpy as np

from .schema_info import LAYOUT

STRUCT_CODES = {
    "bool": "?", "byte": "b", "ubyte": "B", "short": "h", "ushort": "H", "int": "i",
    "uint": "I", "long": "q", "ulong": "Q", "float": "f", "double": "d",
}  # fmt: skip
NUMPY_TYPES = {"ubyte": np.uint8, "ushort": np.uint16, "uint": np.uint32, "ulong": np.uint64,
               "byte": np.int8, "short": np.int16, "int": np.int32, "long": np.int64,
               "float": np.float32, "double": np.float64, "bool": np.bool_}  # fmt: skip


def attr_name(field_name: str) -> str:
    """The object API's attribute for a schema field: buffer_id -> bufferId."""
    head, *rest = field_name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def object_class(table: str) -> type:
    """The generated object-API class of a table: WriteBuffer -> WriteBufferT."""
    module = importlib.import_module(f"{LAYOUT['namespace']}.{table}")
    return getattr(module, f"{table}T")


def scalar_type(field: dict) -> str | None:
    """The scalar type a table field is stored as (enums as their underlying type, a
    union's type tag as ubyte); None for fields held by offset."""
    if field["kind"] == "scalar":
        return field["type"]
    if field["kind"] == "enum":
        return LAYOUT["enums"][field["type"]]["type"]
    if field["kind"] == "union_type":
        return "ubyte"
    return None


def element_type(field: dict) -> str:
    """The scalar type of a vector of scalars or enums' elements."""
    if field["element"] == "enum":
        return LAYOUT["enums"][field["type"]]["type"]
    return field["type"]


# The fields of each command (CommandUnion member code -> field names) that hold blob ids:
# a WriteBuffer's data, a read's or golden check's golden (the schema's comments say so).
BLOB_FIELDS: dict[int, tuple[str, ...]] = {
    i + 1: names
    for i, m in enumerate(LAYOUT["unions"]["CommandUnion"]["members"])
    if (names := tuple(f["name"] for f in LAYOUT["tables"][m]["fields"]
                       if f["name"] in ("data", "golden")))
}  # fmt: skip
