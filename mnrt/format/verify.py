"""Structural verification of light-binary FlatBuffers before anything reads them.

Python FlatBuffers has no verifier: its generated accessors trust every offset, so a corrupt
or hostile file can make them raise arbitrary exceptions, read the wrong bytes, or (through
numpy views) expose memory past a vector's end. `verify_flatbuffer` checks everything those
accessors will touch, driven only by `schema_info.LAYOUT`, so a schema change needs no code
change here. Once it accepts a buffer, the generated object API reads it without errors,
and so does the command reader (`unpack.py`), which reads the same fields.

Cost is linear in the buffer: each table position is visited once, each vtable is checked
once per table type, and a work budget the size of the buffer bounds the elements and string
bytes read, so overlapping vectors or shared tables cannot make verification quadratic.

Reading is another matter: the readers decode a table, string or vector once per
reference, so a few kilobytes of shared ones (a vector of 2000 references to one kernel whose
inputs are 2000 references to one long string) would decode to gigabytes. The verifier adds
up what every reference decodes to (memoised per position, so this stays linear) and refuses
a buffer that would decode to more than `MAX_EXPANSION` times its size.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from typing import Any, NoReturn

from mnrt.errors import InvalidBinaryError
from mnrt.format.schema_info import LAYOUT
from mnrt.format.text import bad_name, unprintable

MAX_DEPTH = 64
# Unshared, a buffer decodes to about its size; sharing strings or tables (which mnrt's
# writer does only for whole commands, see DECODED_ONCE) is allowed to multiply that by this.
MAX_EXPANSION = 64
_MIN_EXPANSION_BUDGET = 1 << 16  # bytes: tiny buffers may still share a little
# Vectors of tables whose readers decode each distinct table once (LightBinary.commands), so
# that sharing identical commands, as the writer does, costs nothing when read.
DECODED_ONCE = {("LightBinary", "commands")}

_u8 = struct.Struct("<B").unpack_from
_u16x2 = struct.Struct("<HH").unpack_from
_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i32 = struct.Struct("<i").unpack_from
_INT_FORMATS = {(1, False): "B", (1, True): "b", (2, False): "H", (2, True): "h"}
_INT_FORMATS |= {(4, False): "I", (4, True): "i", (8, False): "Q", (8, True): "q"}

# What a field needs beyond the static vtable checks.
_NONE, _ENUM, _STRUCT, _STRING, _TABLE, _VECTOR, _UNION = range(7)


class _Field:
    """One vtable slot of a table, precompiled from LAYOUT."""

    __slots__ = ("align", "code", "label", "name", "required", "size", "slot", "target")

    def __init__(self, name: str, slot: int, size: int, align: int, required: bool):
        self.name = name
        self.label = "." + name
        self.slot = slot
        self.size = size
        self.align = align
        self.required = required
        self.code = _NONE
        self.target: Any = None


class _Table:
    """A table type: its non-deprecated fields; `index` numbers it for per-call caches."""

    __slots__ = ("fields", "index", "name")

    def __init__(self, name: str, index: int):
        self.name = name
        self.index = index
        self.fields: tuple[_Field, ...] = ()


class _Enum:
    """Reads one enum value and knows the declared ones."""

    __slots__ = ("name", "read", "size", "values")

    def __init__(self, name: str, spec: dict[str, Any]):
        self.name = name
        self.size = spec["size"]
        self.read = struct.Struct("<" + _INT_FORMATS[spec["size"], spec["signed"]]).unpack_from
        self.values = frozenset(spec["values"].values())


class _Struct:
    """A struct's size, alignment and the (offset, enum) pairs that need value checks."""

    __slots__ = ("align", "enums", "name", "size")

    def __init__(self, name: str, size: int, align: int, enums: tuple[tuple[int, _Enum], ...]):
        self.name = name
        self.size = size
        self.align = align
        self.enums = enums


class _Union:
    """Member tables of a union (tag k names members[k - 1]) and their path labels."""

    __slots__ = ("labels", "members", "name", "tag_slot")

    def __init__(self, name: str, field_name: str, members: tuple[_Table, ...], tag_slot: int):
        self.name = name
        self.members = members
        self.labels = tuple(f".{field_name} ({m.name})" for m in members)
        self.tag_slot = tag_slot


class _Vector:
    """Element kind, size and alignment of a vector field; `ident` keys its memo entries.
    `once`: its readers decode each distinct element table once (see DECODED_ONCE)."""

    __slots__ = ("align", "code", "element", "ident", "once", "size")

    def __init__(self, ident: int, code: int, element: Any, size: int, align: int):
        self.ident = ident
        self.code = code
        self.element = element
        self.size = size
        self.align = align
        self.once = False


def _compile(layout: dict[str, Any]) -> dict[str, _Table]:
    """Turn LAYOUT into the lookup-free objects the verifier's hot loop walks."""
    enums = {name: _Enum(name, spec) for name, spec in layout["enums"].items()}
    structs: dict[str, _Struct] = {}

    def struct_info(name: str) -> _Struct:
        if name not in structs:
            spec = layout["structs"][name]
            checks: list[tuple[int, _Enum]] = []
            for f in spec["fields"]:
                if f["kind"] == "enum":
                    checks.append((f["offset"], enums[f["type"]]))
                elif f["kind"] == "struct":
                    inner = struct_info(f["type"])
                    checks += [(f["offset"] + off, e) for off, e in inner.enums]
            structs[name] = _Struct(name, spec["size"], spec["align"], tuple(checks))
        return structs[name]

    tables = {name: _Table(name, i) for i, name in enumerate(layout["tables"])}
    vectors = 0
    for name, spec in layout["tables"].items():
        fields = []
        for f in spec["fields"]:
            if f["deprecated"]:
                continue
            kind = f["kind"]
            if kind in ("scalar", "enum", "union_type"):
                size = align = f["size"]
            elif kind == "struct":
                size, align = f["size"], f["align"]
            else:
                size = align = 4
            field = _Field(f["name"], f["slot"], size, align, f["required"])
            if kind == "enum":
                field.code, field.target = _ENUM, enums[f["type"]]
            elif kind == "struct":
                info = struct_info(f["type"])
                field.code, field.target = (_STRUCT if info.enums else _NONE), info
            elif kind == "string":
                field.code = _STRING
            elif kind == "table":
                field.code, field.target = _TABLE, tables[f["type"]]
            elif kind == "union":
                members = tuple(tables[m] for m in layout["unions"][f["type"]]["members"])
                field.code = _UNION
                field.target = _Union(f["type"], f["name"], members, f["slot"] - 1)
            elif kind == "vector":
                field.code = _VECTOR
                field.target = _vector(vectors, f, enums, struct_info, tables)
                field.target.once = (name, f["name"]) in DECODED_ONCE
                vectors += 1
            fields.append(field)
        tables[name].fields = tuple(fields)
    return tables


def _vector(
    ident: int,
    spec: dict[str, Any],
    enums: dict[str, _Enum],
    struct_info: Callable[[str], _Struct],
    tables: dict[str, _Table],
) -> _Vector:
    element = spec["element"]
    if element == "table":
        return _Vector(ident, _TABLE, tables[spec["type"]], 4, 4)
    if element == "string":
        return _Vector(ident, _STRING, None, 4, 4)
    if element == "enum":
        return _Vector(ident, _ENUM, enums[spec["type"]], spec["size"], spec["align"])
    if element == "struct":
        info = struct_info(spec["type"])
        return _Vector(ident, _STRUCT if info.enums else _NONE, info, info.size, info.align)
    return _Vector(ident, _NONE, None, spec["size"], spec["align"])


_TABLES = _compile(LAYOUT)
_ROOT_TYPE: str = LAYOUT["root_type"]
_IDENTIFIER: bytes | None = (LAYOUT["file_identifier"] or "").encode() or None


def _render_path(path: Any) -> str:
    """Path tuples are (parent, segment) chains built lazily; render one for a message."""
    parts = []
    while isinstance(path, tuple):
        path, segment = path
        parts.append(f"[{segment}]" if isinstance(segment, int) else segment)
    parts.append(path)
    return "".join(reversed(parts))


def verify_flatbuffer(
    buf: bytes | bytearray | memoryview | mmap.mmap,
    root: str = "LightBinary",
    *,
    size_prefixed: bool = True,
) -> int:
    """Check that `buf` holds a well-formed FlatBuffer whose root is table `root`.

    Returns the size of the FlatBuffer region, size prefix included (the data section of a
    light binary starts at the next 64-byte boundary after it). Raises InvalidBinaryError,
    with the byte offset of the problem in `buf` and the table/field path, for anything the
    generated accessors could trip over. `buf` is only viewed, never copied."""
    if root not in _TABLES:
        raise ValueError(f"{root!r} is not a table of the schema")
    with memoryview(buf) as base, base.cast("B") as mv:
        if root == _ROOT_TYPE and size_prefixed and _IDENTIFIER is not None:
            _check_identifier(mv)
        return _Verifier(mv, size_prefixed).run(_TABLES[root])


def _check_identifier(mv: memoryview) -> None:
    """Say first what a file is not: a size prefix read from a text file would otherwise be
    the error, and a number that means nothing to whoever opened the wrong file."""
    found = bytes(mv[8:12])
    if len(mv) >= 12 and found == _IDENTIFIER:
        return
    head = bytes(mv[:64])
    hint = ""
    if head.lstrip().startswith(b"{"):
        hint = "; it looks like JSON: `mnrt convert` turns a light binary's JSON form back into one"
    elif _looks_like_onnx(head):
        hint = "; it looks like an ONNX model: `mnrt compile MODEL -o OUT.mnlb` makes one of it"
    raise InvalidBinaryError(
        f"not a light binary: no {_IDENTIFIER.decode()} identifier at byte 8{hint}",
        offset=min(8, len(mv)),
    )


def _looks_like_onnx(head: bytes) -> bool:
    """Whether a file begins as an ONNX model (a ModelProto) does: its ir_version (field 1,
    a small varint), then its producer_name (field 2) or its graph (field 7), as every
    exporter and onnx.save writes them."""
    return len(head) >= 3 and head[0] == 0x08 and 1 <= head[1] <= 0x7F and head[2] in (0x12, 0x3A)


class _Verifier:
    """State of one verification: the view, the region bounds, memos and the work budget."""

    def __init__(self, mv: memoryview, size_prefixed: bool):
        self.mv = mv
        # Every distinct string (text, path, offset), judged once the walk is done.
        self.texts: list[tuple[str, Any, int]] = []
        if size_prefixed:
            if len(mv) < 4:
                self.fail("buffer too short for a size prefix", 0)
            size = _u32(mv, 0)[0]
            if size < 8:
                self.fail(f"size prefix {size} is smaller than a FlatBuffer header", 0)
            if 4 + size > len(mv):
                self.fail(f"size prefix {size} runs past the end of the {len(mv)}-byte buffer", 0)
            self.start, self.end = 4, 4 + size
        else:
            if len(mv) < 8:
                self.fail("buffer too short for a FlatBuffer header", 0)
            self.start, self.end = 0, len(mv)

    @staticmethod
    def fail(message: str, offset: int) -> NoReturn:
        raise InvalidBinaryError(message, offset=offset)

    def run(self, root: _Table) -> int:
        mv, start, end = self.mv, self.start, self.end
        if root.name == _ROOT_TYPE and _IDENTIFIER is not None:
            found = bytes(mv[start + 4 : start + 8])
            if found != _IDENTIFIER:
                self.fail(f"file identifier is {found!r}, expected {_IDENTIFIER!r}", start + 4)
        decoded = self._walk(root)
        limit = MAX_EXPANSION * max(len(mv), _MIN_EXPANSION_BUDGET)
        if decoded > limit:
            self.fail(
                f"shared tables, strings or vectors would decode to {decoded} bytes, more than "
                f"{MAX_EXPANSION} times the {len(mv)}-byte buffer (corrupt or hostile); "
                "capture the binary again",
                start,
            )
        # Last, so that a budget or expansion error is found before the text is judged.
        for text, path, at in self.texts:
            problem = bad_name(text) if path[1] == ".name" else unprintable(text)
            if problem:
                self.fail(f"{_render_path(path)}: string refused: {problem}", at)
        return end

    def _walk(self, root: _Table) -> int:
        """Verify the tree of tables under the root; closures keep the hot path local.
        Returns how many bytes reading it decodes (inline tables, strings and vector
        elements, counted once per reference)."""
        mv, start, end = self.mv, self.start, self.end
        fail = self.fail
        # Position -> (type, decoded bytes) of each table; decoded bytes of each string and
        # vector, so that a second reference costs nothing to verify but still counts.
        visited: dict[int, tuple[_Table, int]] = {}
        strings: dict[int, int] = {}
        texts = self.texts
        vectors: dict[tuple[int, int], int] = {}
        vtables: list[dict[int, tuple[int, int, tuple[tuple[int, int, Any, _Field], ...]]]] = [
            {} for _ in _TABLES
        ]
        budget = end - start

        def spend(amount: int, path: Any, offset: int) -> None:
            nonlocal budget
            budget -= amount
            if budget < 0:
                fail(f"{_render_path(path)}: vectors or strings overlap", offset)

        def vtable(pos: int, vt: int, table: _Table, path: Any) -> tuple[int, int, tuple]:
            """Check a vtable for this table type once; return (inline size, pos % 8, checks)."""
            where = _render_path(path)
            if vt & 1 or vt < start or vt + 4 > end:
                fail(f"{where}: vtable at {vt} lies outside the buffer", pos)
            vsize, tsize = _u16x2(mv, vt)
            if vsize < 4 or vsize & 1 or vt + vsize > end:
                fail(f"{where}: vtable size {vsize} is invalid or runs past the end", vt)
            if tsize < 4:
                fail(f"{where}: table size {tsize} is smaller than its vtable offset", vt + 2)
            mod8 = -1
            checks = []
            for field in table.fields:
                entry = 4 + 2 * field.slot
                off = _u16(mv, vt + entry)[0] if entry < vsize else 0
                if off == 0:
                    if field.required:
                        fail(f"{where}{field.label}: required field is missing", pos)
                    if field.code == _UNION:
                        tag_entry = 4 + 2 * field.target.tag_slot
                        tag_off = _u16(mv, vt + tag_entry)[0] if tag_entry < vsize else 0
                        if tag_off:
                            checks.append((_UNION, tag_off, (field.target, 0), field))
                    continue
                if off < 4 or off + field.size > tsize:
                    fail(f"{where}{field.label}: field at {off} lies outside the table", vt + entry)
                if field.align == 8:
                    want = -off % 8
                    if want not in (0, 4) or mod8 not in (-1, want):
                        fail(f"{where}{field.label}: field cannot be 8-byte aligned", vt + entry)
                    mod8 = want
                elif off % field.align:
                    fail(f"{where}{field.label}: field is misaligned", vt + entry)
                if field.code == _UNION:
                    tag_entry = 4 + 2 * field.target.tag_slot
                    tag_off = _u16(mv, vt + tag_entry)[0] if tag_entry < vsize else 0
                    if tag_off == 0:
                        fail(f"{where}{field.label}: union value without a type tag", vt + entry)
                    checks.append((_UNION, tag_off, (field.target, off), field))
                elif field.code != _NONE:
                    checks.append((field.code, off, field.target, field))
            plan = (tsize, mod8, tuple(checks))
            vtables[table.index][vt] = plan
            return plan

        def table(pos: int, t: _Table, path: Any, depth: int, ref: int) -> int:
            """Verify the table at pos, referred to by the offset at ref; return the bytes
            reading it decodes. Offsets only point forward, so a table is never reached
            again from inside itself."""
            seen = visited.get(pos)
            if seen is not None:
                if seen[0] is not t:
                    fail(f"{_render_path(path)}: table is also used as {seen[0].name}", pos)
                return seen[1]
            if depth > MAX_DEPTH:
                fail(f"{_render_path(path)}: tables nested deeper than {MAX_DEPTH}", pos)
            if pos & 3 or pos + 4 > end:
                fail(f"{_render_path(path)}: table at {pos} is misaligned or out of bounds", ref)
            visited[pos] = (t, 0)
            vt = pos - _i32(mv, pos)[0]
            plan = vtables[t.index].get(vt)
            tsize, mod8, checks = plan if plan is not None else vtable(pos, vt, t, path)
            if pos + tsize > end:
                fail(f"{_render_path(path)}: table of {tsize} bytes runs past the end", pos)
            if mod8 >= 0 and pos & 7 != mod8:
                fail(f"{_render_path(path)}: 8-byte fields of the table are misaligned", pos)
            decoded = tsize
            for code, off, target, field in checks:
                at = pos + off
                if code == _UNION:
                    decoded += union(pos, at, target, field, path, depth)
                elif code == _TABLE:
                    decoded += table(
                        at + _u32(mv, at)[0], target, (path, field.label), depth + 1, at
                    )
                elif code == _VECTOR:
                    decoded += vector(at, target, (path, field.label), depth)
                elif code == _STRING:
                    decoded += string(at, (path, field.label))
                elif code == _ENUM:
                    value = target.read(mv, at)[0]
                    if value not in target.values:
                        where = f"{_render_path(path)}{field.label}"
                        fail(f"{where}: {value} is not a value of enum {target.name}", at)
                else:
                    struct_enums(at, target, (path, field.label))
            visited[pos] = (t, decoded)
            return decoded

        def union(
            pos: int, tag_at: int, target: tuple, field: _Field, path: Any, depth: int
        ) -> int:
            u, off = target
            tag = mv[tag_at]
            if tag == 0:
                if off:
                    fail(f"{_render_path(path)}{field.label}: NONE type tag with a value", tag_at)
                return 0
            if tag > len(u.members):
                where = f"{_render_path(path)}{field.label}"
                fail(f"{where}: type tag {tag} is not a member of union {u.name}", tag_at)
            if not off:
                fail(f"{_render_path(path)}{field.label}: type tag {tag} without a value", tag_at)
            at = pos + off
            member, label = u.members[tag - 1], u.labels[tag - 1]
            return table(at + _u32(mv, at)[0], member, (path, label), depth + 1, at)

        def string(at: int, path: Any) -> int:
            pos = at + _u32(mv, at)[0]
            seen = strings.get(pos)
            if seen is not None:
                return seen
            if pos & 3 or pos + 4 > end:
                fail(f"{_render_path(path)}: string at {pos} is misaligned or out of bounds", at)
            length = _u32(mv, pos)[0]
            stop = pos + 4 + length
            if stop >= end:
                fail(f"{_render_path(path)}: string of {length} bytes runs past the end", pos)
            if mv[stop]:
                fail(f"{_render_path(path)}: string is not NUL-terminated", stop)
            spend(length + 4, path, pos)
            try:
                text = str(mv[pos + 4 : stop], "utf-8")
            except UnicodeDecodeError as exc:
                fail(f"{_render_path(path)}: string is not UTF-8", pos + 4 + exc.start)
            texts.append((text, path, pos + 4))
            strings[pos] = length + 4
            return length + 4

        def vector(at: int, v: _Vector, path: Any, depth: int) -> int:
            pos = at + _u32(mv, at)[0]
            if pos & 3 or pos + 4 > end:
                fail(f"{_render_path(path)}: vector at {pos} is misaligned or out of bounds", at)
            count = _u32(mv, pos)[0]
            body = pos + 4
            if body + count * v.size > end:
                fail(f"{_render_path(path)}: vector of {count} elements runs past the end", pos)
            if body % v.align:
                fail(f"{_render_path(path)}: vector elements are misaligned", body)
            code = v.code
            decoded = 4 + count * v.size
            if code == _NONE or count == 0:
                return decoded
            seen = vectors.get((pos, v.ident))
            if seen is not None:
                return seen
            spend(count * v.size, path, pos)
            if code == _TABLE:
                element = v.element
                offsets = struct.unpack_from(f"<{count}I", mv, body)
                once: set[int] = set()
                for i, rel in enumerate(offsets):
                    at = body + 4 * i
                    size = table(at + rel, element, (path, i), depth + 1, at)
                    if v.once:
                        size = 0 if at + rel in once else size
                        once.add(at + rel)
                    decoded += size
            elif code == _STRING:
                for i in range(count):
                    decoded += string(body + 4 * i, (path, i))
            elif code == _ENUM:
                e = v.element
                for i in range(count):
                    if e.read(mv, body + i * e.size)[0] not in e.values:
                        where = _render_path((path, i))
                        fail(f"{where}: not a value of enum {e.name}", body + i * e.size)
            else:
                for i in range(count):
                    struct_enums(body + i * v.size, v.element, (path, i))
            vectors[pos, v.ident] = decoded
            return decoded

        def struct_enums(at: int, s: _Struct, path: Any) -> None:
            for off, e in s.enums:
                if e.read(mv, at + off)[0] not in e.values:
                    where = _render_path(path)
                    fail(f"{where}: not a value of enum {e.name} in struct {s.name}", at + off)

        return table(start + _u32(mv, start)[0], root, root.name, 0, start)
