"""Packing the command list into a FlatBuffer, fast enough for end_capture.

Two things make it fast. Identical commands (a program enqueued again on the same buffers,
a trace replayed again) are packed once and shared: FlatBuffers lets many vector entries
point at one table. And tables made only of scalars (and scalar vectors) are written by
copying a template: the first table of each type is packed by the generated code with every
field present; its layout is read back from its vtable, and later tables of that type are
written with one `struct.pack_into`, pointing at the same vtable. The result is an ordinary
FlatBuffer (the verifier and the generated readers check it like any other).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

import flatbuffers
import numpy as np

from .fb import Command as fb_command
from .fb.Blob import BlobT
from .fb.Command import CommandT
from .fb.KernelFingerprint import KernelFingerprintT
from .fields import (
    BLOB_FIELDS,
    NUMPY_TYPES,
    STRUCT_CODES,
    attr_name,
    element_type,
    scalar_type,
)
from .schema_info import LAYOUT

_NUMPY_CODES = {"?": "?", "b": "i1", "B": "u1", "h": "<i2", "H": "<u2", "i": "<i4",
                "I": "<u4", "q": "<i8", "Q": "<u8", "f": "<f4", "d": "<f8"}  # fmt: skip


def _items(vector: Any) -> Any:
    """A decoded vector (numpy array), a list, or () for an absent one."""
    return () if vector is None else vector


class _Layout(NamedTuple):
    size: int  # of the inline table
    align: int
    vectors: tuple[tuple[str, int, type], ...]  # (attribute, slot, numpy dtype)
    unions: tuple[tuple[str, int], ...]  # (attribute, slot)
    order: tuple[tuple[str, str, int], ...]  # (kind: s, v or u; attribute, offset)
    struct: struct.Struct  # soffset, then each field in place
    columns: np.dtype  # the same, for many rows
    scalar_names: tuple[str, ...]
    scalar_struct: struct.Struct  # the scalars alone, packed (`_Template.key`)


@functools.cache
def _layout(table: str, slots: tuple[int, ...], size: int) -> tuple:
    """What a template of `table` holds that follows from the type and its vtable (each
    field's offset in the table, `slots`, and the table's `size`): its fields by kind, its
    alignment, and one struct format (and numpy dtype, for many rows) for the whole inline
    table: soffset, then each field in place."""
    fields = [f for f in LAYOUT["tables"][table]["fields"] if not f.get("deprecated")]
    scalars: list[tuple[str, int, str]] = []  # (attribute, slot, struct format)
    vectors: list[tuple[str, int, type]] = []  # (attribute, slot, numpy dtype)
    unions: list[tuple[str, int]] = []  # (attribute, slot): the value's offset
    for f in fields:
        scalar = scalar_type(f)
        if scalar is not None:
            scalars.append((attr_name(f["name"]), f["slot"], STRUCT_CODES[scalar]))
        elif f["kind"] == "vector" and f["element"] in ("scalar", "enum"):
            vectors.append((attr_name(f["name"]), f["slot"], NUMPY_TYPES[element_type(f)]))
        elif f["kind"] == "union":
            unions.append((attr_name(f["name"]), f["slot"]))
        else:
            raise TypeError(f"{table}.{f['name']} is not a scalar field")
    align = 8 if any(fmt in "qQd" for _, _, fmt in scalars) else 4
    placed = sorted(
        [(0, "i", None)]
        + [(slots[slot], fmt, ("s", name)) for name, slot, fmt in scalars]
        + [(slots[slot], "I", ("v", name)) for name, slot, _ in vectors]
        + [(slots[slot], "I", ("u", name)) for name, slot in unions]
    )
    fmt, at = "<", 0
    order: list[tuple[str, str, int]] = []
    for offset, code, what in placed:
        if offset < at:
            raise TypeError(f"{table}: overlapping fields in the packed template")
        fmt += "x" * (offset - at) + code
        at = offset + struct.calcsize("<" + code)
        if what is not None:
            order.append((what[0], what[1], offset))
    fmt += "x" * (size - at)
    columns = np.dtype(
        {
            "names": ["soffset"] + [name for _, name, _ in order],
            "formats": ["<i4"] + [_NUMPY_CODES[code] for code in _Template._codes(fmt)],
            "offsets": [0] + [offset for _, _, offset in order],
            # Laid end to end, each table is padded to keep the next one aligned.
            "itemsize": -(-size // align) * align,
        }
    )
    scalar_names = tuple(name for name, _, _ in scalars)
    scalar_struct = struct.Struct("<" + "".join(f for _, _, f in scalars))
    return _Layout(size, align, tuple(vectors), tuple(unions), tuple(order), struct.Struct(fmt),
                   columns, scalar_names, scalar_struct)  # fmt: skip


class _Template:
    """The layout of one table type, learned from a table the generated code packed."""

    def __init__(self, b: flatbuffers.Builder, table: str, obj: Any) -> None:
        b.ForceDefaults(True)
        try:
            off = obj.Pack(b)
        finally:
            b.ForceDefaults(False)
        self.first = off
        buf, end = b.Bytes, len(b.Bytes)
        pos = end - off
        soffset = struct.unpack_from("<i", buf, pos)[0]
        self.vtable = off + soffset  # the vtable's distance from the end of the buffer
        vt = pos - soffset
        vsize, size = struct.unpack_from("<HH", buf, vt)
        slots = struct.unpack_from(f"<{(vsize - 4) // 2}H", buf, vt + 4)
        # What follows from the type and where the vtable puts each field is worked out
        # once: a capture builds a few templates at its end, where such work runs cold.
        layout = _layout(table, slots, size)
        self.size, self.align, self.vectors, self.unions = layout[:4]
        self.order, self.struct, self.columns, self.scalar_names, self.scalar_struct = layout[4:]
        self.phase = off % self.align  # where the table started, modulo its alignment
        b.minalign = max(b.minalign, self.align)

    @staticmethod
    def _codes(fmt: str) -> list[str]:
        """The field codes of a struct format, without padding and the leading soffset."""
        return [c for c in fmt[1:] if c != "x"][1:]

    def pack_rows(
        self,
        b: flatbuffers.Builder,
        columns: dict[str, np.ndarray],
        targets: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Pack many tables of one type at once from columns of scalar values and, for
        union fields, the offsets of the tables they point at; return the new tables'
        offsets. Tables are laid end to end, each padded to keep alignment."""
        targets = targets or {}
        n = len(next(iter(columns.values())))
        size = self.columns.itemsize
        if self.vectors or {name for name, _ in self.unions} != set(targets):
            raise TypeError("pack_rows needs scalar fields, and a target for each union")
        pad = (self.phase - b.Offset() - size) % self.align
        b.Prep(1, pad + n * size)
        b.head -= pad
        offsets = b.Offset() + size * np.arange(1, n + 1, dtype=np.int64)
        # Rows in memory order (the first table packed ends highest), contiguous, so that
        # tobytes() copies the zeroed padding too rather than leaving it uninitialised.
        rows = np.zeros(n, self.columns)
        rows["soffset"] = (self.vtable - offsets)[::-1]
        for name, values in columns.items():
            # With the field's own dtype: a plain conversion of Python ints above 2**63
            # mixed with small ones would go through float64 and lose bits.
            rows[name] = np.asarray(values, dtype=self.columns.fields[name][0])[::-1]
        where = {name: offset for _, name, offset in self.order}
        for name, target in targets.items():
            # An offset field holds the distance from itself to its target.
            rows[name] = (offsets - where[name] - target)[::-1]
        b.head -= n * size
        b.Bytes[b.head : b.head + n * size] = rows.tobytes()
        return offsets

    def wrap(self, b: flatbuffers.Builder, kind: int, body: int) -> int:
        """Write a Command table (union tag `kind`, value at `body`): the one table every
        command has, so it gets its own short path."""
        size = self.size
        pad = (self.phase - b.Offset() - size) % self.align
        b.Prep(1, pad + size)
        b.head -= pad + size
        table = len(b.Bytes) - b.head
        values = [kind if what == "s" else table - offset - body for what, _, offset in self.order]
        self.struct.pack_into(b.Bytes, b.head, self.vtable - table, *values)
        return table

    def key(self, obj: Any) -> tuple:
        """Identity of a table's content: its scalars' bytes (so NaN equals NaN) and vectors."""
        scalars = self.scalar_struct.pack(*[getattr(obj, n) for n in self.scalar_names])
        vectors = [tuple(int(v) for v in _items(getattr(obj, n))) for n, _, _ in self.vectors]
        return (scalars, *vectors)

    def pack(self, b: flatbuffers.Builder, obj: Any, union_offsets: dict[str, int]) -> int:
        vector_offsets = {
            name: b.CreateNumpyVector(np.asarray(_items(getattr(obj, name)), dtype))
            for name, _, dtype in self.vectors
        }
        size = self.size
        pad = (self.phase - b.Offset() - size) % self.align
        b.Prep(1, pad + size)
        b.head -= pad + size  # the padding bytes are already zero: the buffer starts zeroed
        table = len(b.Bytes) - b.head
        values = [
            getattr(obj, name)
            if kind == "s"
            else table - offset - (vector_offsets[name] if kind == "v" else union_offsets[name])
            for kind, name, offset in self.order
        ]
        self.struct.pack_into(b.Bytes, b.head, self.vtable - table, *values)
        return table


# object-API classes pack_tables builds its first table with
LAYOUT_CLASSES = {"Blob": BlobT, "KernelFingerprint": KernelFingerprintT}


def _fast_table(table: str) -> bool:
    for f in LAYOUT["tables"][table]["fields"]:
        if f.get("deprecated") or scalar_type(f) is not None:
            continue
        if f["kind"] == "vector" and f["element"] in ("scalar", "enum"):
            continue
        return False
    return True


_MEMBERS = LAYOUT["unions"]["CommandUnion"]["members"]
_FAST_MEMBER = {i + 1: _fast_table(m) for i, m in enumerate(_MEMBERS)}
# Commands that carry a payload name their own blob, so they rarely repeat: not worth a key.
_UNIQUE = set(BLOB_FIELDS)


# Per member: the attributes of its vector fields.
_VECTORS = {
    i + 1: [attr_name(f["name"]) for f in LAYOUT["tables"][m]["fields"] if f["kind"] == "vector"]
    for i, m in enumerate(_MEMBERS)
}


def _whole(kind: int, body: Any) -> bool:
    """Whether a command has every vector a template needs to learn its layout from: the
    generated code leaves an absent one out of the vtable, even when forced to write
    defaults. Such a command is packed generically, and the next one tried instead."""
    return all(getattr(body, name) is not None for name in _VECTORS[kind])


def pack_tables(b: flatbuffers.Builder, table: str, columns: dict[str, list]) -> int:
    """Pack a vector of one scalar-only table type from columns of values (object-API
    attribute names): the blob list, which can hold many thousands of entries."""
    n = len(next(iter(columns.values()), []))
    if n == 0:
        return _offset_vector(b, np.empty(0, np.int64))
    first = LAYOUT_CLASSES[table](**{k: v[0] for k, v in columns.items()})
    template = _Template(b, table, first)
    rest = template.pack_rows(b, {k: v[1:] for k, v in columns.items()})
    return _offset_vector(b, np.concatenate([[template.first], rest]))


def pack_commands(b: flatbuffers.Builder, commands: Sequence[CommandT]) -> int:
    """Pack every command; return the offset of the commands vector."""
    packed: dict[tuple, int] = {}
    bodies: dict[int, _Template] = {}
    wrapper: _Template | None = None
    offsets = np.empty(len(commands), np.int64)
    batches: dict[int, list[int]] = {}  # payload commands, packed per type in one go below
    by_object: dict[int, int] = {}  # id(command) -> offset: one object listed many times
    for i, cmd in enumerate(commands):
        off = by_object.get(id(cmd))
        if off is not None:
            offsets[i] = off
            continue
        kind = cmd.cmdType
        template = bodies.get(kind)
        if template is not None:
            if kind in _UNIQUE:
                batches.setdefault(kind, []).append(i)
                continue
            key = (kind, *template.key(cmd.cmd))
            off = packed.get(key)
            if off is None:
                off = packed[key] = wrapper.wrap(b, kind, template.pack(b, cmd.cmd, {}))
        elif cmd.cmd is not None and _FAST_MEMBER.get(kind) and _whole(kind, cmd.cmd):
            template = bodies[kind] = _Template(b, _MEMBERS[kind - 1], cmd.cmd)
            if wrapper is None:
                wrapper = _Template(b, "Command", _Wrapped(kind, template.first))
                off = wrapper.first
            else:
                off = wrapper.wrap(b, kind, template.first)
            packed[(kind, *template.key(cmd.cmd))] = off
        else:
            off = cmd.Pack(b)  # tables with strings or sub-tables: rare, packed generically
        offsets[i] = by_object[id(cmd)] = off
    for kind, indices in batches.items():
        template = bodies[kind]
        objs = [commands[i].cmd for i in indices]
        columns = {n: [getattr(o, n) for o in objs] for n in template.scalar_names}
        body = template.pack_rows(b, columns)
        kinds = np.full(len(indices), kind, np.uint8)
        offsets[indices] = wrapper.pack_rows(b, {"cmdType": kinds}, {"cmd": body})
    return _offset_vector(b, offsets)


class _Wrapped:
    """A Command whose body is already packed at `offset` (for the Command template)."""

    __slots__ = ("cmd", "cmdType", "offset")

    def __init__(self, kind: int, offset: int) -> None:
        self.cmdType = kind
        self.offset = offset
        self.cmd = self

    def Pack(self, b: flatbuffers.Builder) -> int:  # the object-API protocol
        fb_command.CommandStart(b)
        fb_command.CommandAddCmdType(b, self.cmdType)
        fb_command.CommandAddCmd(b, self.offset)
        return fb_command.CommandEnd(b)


def _offset_vector(b: flatbuffers.Builder, offsets: np.ndarray) -> int:
    """A vector of table offsets, written in one numpy operation instead of one call each."""
    n = len(offsets)
    b.StartVector(4, n, 4)
    # Element i will sit (n - i) * 4 bytes past the current offset, counted from the end;
    # a uoffset holds the distance from its own position to its target.
    positions = b.Offset() + 4 * (n - np.arange(n, dtype=np.int64))
    rel = positions - offsets
    if n and (rel.min() <= 0 or rel.max() >= 1 << 32):
        raise ValueError("offset vector out of range")
    b.head -= 4 * n
    b.Bytes[b.head : b.head + 4 * n] = rel.astype("<u4").tobytes()
    return b.EndVector()
