"""Reading commands into the generated object-API classes, fast enough for replay.

The generated `CommandT.InitFromObj` reads every field through the flatbuffers package's
accessors, several Python calls per field: for a capture of 10k calls, decoding took more
than half of `mnrt run`'s time. This reader gives the same objects (the generated classes,
with the same values, types and defaults; tests compare the two on every command kind) in
a fraction of the time. Each table's vtable is read once: the tables a writer packs from
one template share it, and every table with that vtable then takes one `struct.unpack_from`
for its scalars, plus one read for each string, vector or sub-table it holds.

It reads only what the verifier has checked (`verify_flatbuffer` runs on every file before
its commands are decoded): offsets, vtables, strings and vectors in bounds.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from .fields import NUMPY_TYPES, STRUCT_CODES, attr_name, element_type, object_class, scalar_type
from .schema_info import LAYOUT

_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct("<H").unpack_from
_MAX_LAYOUTS = 1024  # vtables remembered per table type

Buf = memoryview | bytes | bytearray
Read = Callable[[Buf, int], Any]  # (buffer, position of a field's offset) -> value


def _string(buf: Buf, at: int) -> bytes:
    at += _U32(buf, at)[0]
    return bytes(buf[at + 4 : at + 4 + _U32(buf, at)[0]])


def _vector(buf: Buf, at: int) -> tuple[int, int]:
    """(count, position of the first element) of the vector whose offset is at `at`."""
    at += _U32(buf, at)[0]
    return _U32(buf, at)[0], at + 4


def _numbers(dtype: type) -> Read:
    def read(buf: Buf, at: int) -> np.ndarray:
        count, first = _vector(buf, at)
        return np.frombuffer(buf, dtype, count, first)

    return read


def _strings(buf: Buf, at: int) -> list[bytes]:
    count, first = _vector(buf, at)
    return [_string(buf, first + 4 * i) for i in range(count)]


class _Layout:
    """Where one vtable puts a table's fields: the scalars, read with one struct, and the
    fields held by offset, each with its reader."""

    __slots__ = ("names", "refs", "scalar_names", "struct", "unions")

    def __init__(self, table: _Table, offsets: bytes) -> None:
        at = struct.unpack(f"<{len(offsets) // 2}H", offsets)
        present = [(at[slot], spec) for slot, spec in table.fields.items()
                   if slot < len(at) and at[slot]]  # fmt: skip
        scalars = sorted(
            (off, name, code) for off, (name, code) in present if isinstance(code, str)
        )
        fmt, end = "<", 0
        for off, _, code in scalars:
            if off < end:  # fields that overlap (legal, if odd): one struct cannot read them
                fmt = None
                break
            fmt += "x" * (off - end) + code
            end = off + struct.calcsize("<" + code)
        self.struct = struct.Struct(fmt) if fmt is not None else None
        self.names = [(name, off, struct.Struct("<" + code)) for off, name, code in scalars]
        self.scalar_names = [name for _, name, _ in scalars]
        self.refs = [(off, name, read) for off, (name, read) in present if callable(read)]
        # (offset, attribute, the attribute of its type tag, which the scalars read first,
        # the member readers)
        self.unions = [(off, name, *table.unions[name]) for off, (name, read) in present
                       if read is None]  # fmt: skip


class _Table:
    """Reads one table type into its generated object-API class. Built for every table
    reachable from Command when this module is imported, so threads only ever read them."""

    def __init__(self, name: str, tables: dict[str, _Table]) -> None:
        self.cls = object_class(name)
        fields = LAYOUT["tables"][name]["fields"]
        self.slots = 1 + max((f["slot"] for f in fields), default=-1)
        # slot -> (attribute, struct code | reader | None for a union's value)
        self.fields: dict[int, tuple[str, str | Read | None]] = {}
        # a union value's attribute -> (its type tag's attribute, a reader per member)
        self.unions: dict[str, tuple[str, list[Read]]] = {}
        self.refers_to: list[str] = []  # the tables its fields hold
        tags = {}
        for f in fields:
            if f.get("deprecated"):
                continue
            attr, kind = attr_name(f["name"]), f["kind"]
            code = scalar_type(f)
            if code is not None:
                self.fields[f["slot"]] = (attr, STRUCT_CODES[code])
                if kind == "union_type":
                    tags[f["type"]] = attr
            elif kind == "string":
                self.fields[f["slot"]] = (attr, _string)
            elif kind == "table":
                self.fields[f["slot"]] = (attr, _sub(f["type"], tables))
                self.refers_to.append(f["type"])
            elif kind == "vector" and f["element"] in ("scalar", "enum"):
                self.fields[f["slot"]] = (attr, _numbers(NUMPY_TYPES[element_type(f)]))
            elif kind == "vector" and f["element"] == "string":
                self.fields[f["slot"]] = (attr, _strings)
            elif kind == "vector" and f["element"] == "table":
                self.fields[f["slot"]] = (attr, _sub_list(f["type"], tables))
                self.refers_to.append(f["type"])
            elif kind == "union":
                members = LAYOUT["unions"][f["type"]]["members"]
                self.fields[f["slot"]] = (attr, None)
                self.unions[attr] = (tags[f["type"]], [_sub(m, tables) for m in members])
                self.refers_to.extend(members)
            else:
                raise TypeError(f"{name}.{f['name']}: a {kind} field the reader cannot read")
        self._layouts: dict[bytes, _Layout] = {}

    def read(self, buf: Buf, pos: int) -> Any:
        vt = pos - _I32(buf, pos)[0]
        # Keyed by the offsets of this schema's fields only, however long the vtable is (a
        # newer writer's, or a hostile one): reading costs what the fields do, as it does
        # for the object API, and the cache holds a few bytes a layout.
        slots = min((_U16(buf, vt)[0] - 4) // 2, self.slots)
        key = bytes(buf[vt + 4 : vt + 4 + 2 * slots]) if slots > 0 else b""
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= _MAX_LAYOUTS:  # files with a vtable per table
                self._layouts.clear()
            layout = self._layouts[key] = _Layout(self, key)
        obj = self.cls()
        values = obj.__dict__
        if layout.struct is not None:
            values.update(zip(layout.scalar_names, layout.struct.unpack_from(buf, pos)))
        else:
            for name, off, one in layout.names:
                values[name] = one.unpack_from(buf, pos + off)[0]
        for off, name, read in layout.refs:
            values[name] = read(buf, pos + off)
        for off, name, tag, members in layout.unions:
            kind = values[tag]
            if 1 <= kind <= len(members):
                values[name] = members[kind - 1](buf, pos + off)
        return obj


def _sub(name: str, tables: dict[str, _Table]) -> Read:
    """A reader for a field holding a table by offset (looked up when it reads: tables
    nest, so not all of them exist while the others are built)."""

    def read(buf: Buf, at: int) -> Any:
        return tables[name].read(buf, at + _U32(buf, at)[0])

    return read


def _sub_list(name: str, tables: dict[str, _Table]) -> Read:
    one = _sub(name, tables)

    def read(buf: Buf, at: int) -> list:
        count, first = _vector(buf, at)
        return [one(buf, first + 4 * i) for i in range(count)]

    return read


def _build(root: str) -> dict[str, _Table]:
    """A reader for `root` and every table it reaches."""
    tables: dict[str, _Table] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name not in tables:
            tables[name] = _Table(name, tables)
            todo.extend(tables[name].refers_to)
    return tables


_TABLES = _build("Command")
_COMMAND = _TABLES["Command"]
_COMMANDS_SLOT = next(
    f["slot"] for f in LAYOUT["tables"][LAYOUT["root_type"]]["fields"] if f["name"] == "commands"
)


def read_commands(buf: Buf, root: int) -> list:
    """Every `CommandT` of the root table at `root`, in order; a table that many entries
    share (the writer shares identical commands) is read once and its object listed each
    time."""
    vt = root - _I32(buf, root)[0]
    voffset = 4 + 2 * _COMMANDS_SLOT
    off = _U16(buf, vt + voffset)[0] if voffset < _U16(buf, vt)[0] else 0
    if not off:
        return []
    count, first = _vector(buf, root + off)
    decoded: dict[int, Any] = {}
    out = []
    read = _COMMAND.read
    for i in range(count):
        at = first + 4 * i
        pos = at + _U32(buf, at)[0]
        obj = decoded.get(pos)
        if obj is None:
            obj = decoded[pos] = read(buf, pos)
        out.append(obj)
    return out
