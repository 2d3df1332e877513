"""Light binaries as JSON, and back: for reading, diffing and hand-editing.

The conversion walks the schema's LAYOUT, so it covers every table with no per-table code:
fields keep their schema names, enums are written by name, unions as {"type": member, ...}.
Blobs are written decompressed, as base64 inside the JSON or as side files next to it.
"""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from typing import Any

import xxhash

from ..errors import InvalidBinaryError, MnrtError
from .binary import LightBinary, check_readable
from .blobs import BlobStore
from .fb.DeviceDescription import DeviceDescriptionT
from .fb.Metadata import MetadataT
from .fields import attr_name, object_class
from .files import open_regular, write_atomically
from .fingerprints import Fingerprint, Sample, Stats
from .schema_info import LAYOUT

JSON_FORMAT = "mnrt-light-binary-json"
_TABLES, _ENUMS, _UNIONS, _STRUCTS = (LAYOUT[k] for k in ("tables", "enums", "unions", "structs"))
_ENUM_NAMES = {name: {v: k for k, v in e["values"].items()} for name, e in _ENUMS.items()}


# --- to JSON ----------------------------------------------------------------------------


def _scalar_out(value: Any, field: dict) -> Any:
    if field["kind"] == "enum":
        return _ENUM_NAMES[field["type"]].get(int(value), int(value))
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value.item() if hasattr(value, "item") else value


def table_to_json(table: str, obj: Any) -> dict:
    out: dict[str, Any] = {}
    for f in _TABLES[table]["fields"]:
        kind = f["kind"]
        if kind == "union_type" or f.get("deprecated"):
            continue
        value = getattr(obj, attr_name(f["name"]), None)
        if value is None:
            continue
        if kind == "union":
            member = LAYOUT["unions"][f["type"]]["members"][
                getattr(obj, attr_name(f["name"] + "_type")) - 1
            ]
            out[f["name"]] = {"type": member, **table_to_json(member, value)}
        elif kind == "table":
            out[f["name"]] = table_to_json(f["type"], value)
        elif kind == "struct":
            out[f["name"]] = {
                s["name"]: getattr(value, attr_name(s["name"]))
                for s in _STRUCTS[f["type"]]["fields"]
            }
        elif kind == "vector":
            if f["element"] == "table":
                out[f["name"]] = [table_to_json(f["type"], v) for v in value]
            else:
                elem = {"kind": "enum" if f["element"] == "enum" else "scalar", "type": f["type"]}
                out[f["name"]] = [_scalar_out(v, elem) for v in value]
        else:
            out[f["name"]] = _scalar_out(value, f)
    return out


def to_json(binary: LightBinary, blob_dir: Path | None = None) -> dict:
    """The whole binary as JSON-ready data; blobs inline (base64) or written to `blob_dir`."""
    root = binary.unpacked()
    doc = {"format": JSON_FORMAT, **table_to_json("LightBinary", root)}
    _stamps_as_hex(doc)
    blobs = []
    for i, info in enumerate(binary.blobs.infos, start=1):
        data = binary.blobs.read(i)
        entry: dict[str, Any] = {"id": i, "size": info.size, "hash": f"{info.hash:#018x}"}
        if blob_dir is None:
            entry["base64"] = base64.b64encode(data).decode("ascii")
        else:
            _make_blob_dir(blob_dir)
            name = f"blob{i:06d}.bin"
            write_atomically(blob_dir / name, data)
            entry["file"] = name
        blobs.append(entry)
    doc["blobs"] = blobs
    return doc


def _stamps_as_hex(doc: dict) -> None:
    """The schema hash and integrity hash, which converting back stamps anew, in hex."""
    for name in _STAMPS:
        if doc.get(name) is not None:
            doc[name] = f"{doc[name]:#018x}"


# Header fields every written binary gets from its writer, not from a JSON document.
_STAMPS = ("schema_hash", "integrity")


def _make_blob_dir(blob_dir: Path) -> None:
    try:
        blob_dir.mkdir(exist_ok=True)
    except OSError as e:
        raise MnrtError(
            f"cannot write blob files into {blob_dir}: {e.strerror or e}; give a folder that "
            "exists or can be made in one that does"
        ) from None


def dumps(binary: LightBinary, blob_dir: Path | None = None, with_data: bool = True) -> str:
    doc = to_json(binary, blob_dir) if with_data else describe(binary)
    return json.dumps(doc, indent=1)


def describe(binary: LightBinary) -> dict:
    """Header, commands and blob table without payloads (what `mnrt dump --json` prints)."""
    root = binary.unpacked()
    doc = {"format": JSON_FORMAT, **table_to_json("LightBinary", root)}
    _stamps_as_hex(doc)
    doc["blobs"] = [
        {"id": i, **{k: (f"{v:#018x}" if k == "hash" else v) for k, v in info._asdict().items()}}
        for i, info in enumerate(binary.blobs.infos, start=1)
    ]
    return doc


# --- from JSON --------------------------------------------------------------------------


def _bad(path: str, message: str) -> InvalidBinaryError:
    return InvalidBinaryError(f"JSON {path}: {message}")


def _scalar_in(value: Any, field: dict, path: str) -> Any:
    if field["kind"] == "enum":
        values = _ENUMS[field["type"]]["values"]
        if isinstance(value, str) and value in values:
            return values[value]
        if isinstance(value, int) and not isinstance(value, bool) and value in values.values():
            return value
        raise _bad(path, f"{_show(value)} is not a {field['type']} ({', '.join(values)})")
    kind = "string" if field["kind"] == "string" else field.get("type", "")
    if kind in ("float", "double"):
        if isinstance(value, str) and value in ("nan", "inf", "-inf"):
            return float(value)
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
            try:
                return float(value)
            except OverflowError:  # an integer beyond any double
                pass
    elif kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "string":
        # JSON escapes can spell lone surrogates, which UTF-8 (and so the binary) cannot hold.
        if _utf8(value):
            return value
    elif isinstance(value, int) and not isinstance(value, bool):
        bits = 8 * field.get("size", 8)
        lo, hi = (
            (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
            if field.get("signed")
            else (0, (1 << bits) - 1)
        )
        if lo <= value <= hi:
            return value
    raise _bad(path, f"{_show(value)} is not a valid {kind or field['kind']}")


def _show(value: Any) -> str:
    """A value for a message, cut short: a hostile document's values can be megabytes long."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _utf8(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def table_from_json(table: str, doc: Any, path: str) -> Any:
    if not isinstance(doc, dict):
        raise _bad(path, f"expected an object for {table}")
    _check_keys(doc, path)
    obj = object_class(table)()
    known = {f["name"] for f in _TABLES[table]["fields"]}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise _bad(path, f"unknown field(s) {', '.join(unknown)} in {table}")
    for f in _TABLES[table]["fields"]:
        name, kind = f["name"], f["kind"]
        if kind == "union_type" or name not in doc:
            if f.get("required") and name not in doc:
                raise _bad(path, f"{table}.{name} is required")
            continue
        value, where = doc[name], f"{path}.{name}"
        if kind == "union":
            members = LAYOUT["unions"][f["type"]]["members"]
            member = value.get("type") if isinstance(value, dict) else None
            if member not in members:
                raise _bad(where, f"union type must be one of {', '.join(members)}")
            setattr(obj, attr_name(name + "_type"), members.index(member) + 1)
            body = {k: v for k, v in value.items() if k != "type"}
            setattr(obj, attr_name(name), table_from_json(member, body, where))
        elif kind == "table":
            setattr(obj, attr_name(name), table_from_json(f["type"], value, where))
        elif kind == "struct":
            if not isinstance(value, dict):
                raise _bad(where, f"expected an object for {f['type']}")
            _check_keys(value, where)
            extra = sorted(set(value) - {s["name"] for s in _STRUCTS[f["type"]]["fields"]})
            if extra:
                raise _bad(where, f"unknown field(s) {', '.join(extra)} in {f['type']}")
            struct = object_class(f["type"])()
            for s in _STRUCTS[f["type"]]["fields"]:
                setattr(struct, attr_name(s["name"]), _scalar_in(value.get(s["name"], 0), s, where))
            setattr(obj, attr_name(name), struct)
        elif kind == "vector":
            if not isinstance(value, list):
                raise _bad(where, "expected a list")
            if f["element"] == "table":
                items = [
                    table_from_json(f["type"], v, f"{where}[{i}]") for i, v in enumerate(value)
                ]
            else:
                elem = {
                    "kind": "enum" if f["element"] == "enum" else "scalar",
                    "type": f["type"],
                    "size": f.get("size", 8),
                    "signed": f.get("signed", False),
                }
                items = [_scalar_in(v, elem, f"{where}[{i}]") for i, v in enumerate(value)]
            setattr(obj, attr_name(name), items)
        else:
            setattr(obj, attr_name(name), _scalar_in(value, f, where))
    return obj


def from_json(doc: Any, base_dir: Path | None = None) -> LightBinary:
    """Rebuild a binary from `to_json` output (blob files are looked up in `base_dir`)."""
    if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
        raise InvalidBinaryError(f'not a light binary JSON document (no "format": "{JSON_FORMAT}")')
    for key in ("version", "commands"):
        if key not in doc:
            raise _bad("$", f'no "{key}": not a whole light binary document')
    root = table_from_json(
        "LightBinary",
        {k: v for k, v in doc.items() if k not in ("format", "blobs", *_STAMPS)},
        "$",
    )
    # Restamped with this mnrt's version below, so a version it cannot read is refused
    # here, as the binary reader would refuse it (never silently restamped).
    check_readable(root.version.major, root.version.minor)
    entries = doc.get("blobs", [])
    if not isinstance(entries, list):
        raise _bad("$.blobs", "expected a list")
    for name in ("fingerprint_runs", "fingerprint_run"):
        if doc.get(name) == 0:
            raise _bad(f"$.{name}", "must be at least 1 (it is the sample fingerprints summarise)")
    blobs = BlobStore()
    for i, entry in enumerate(entries, start=1):
        data = _blob_data(entry, i, base_dir)
        if blobs.add(data) != i:
            raise _bad(f"$.blobs[{i - 1}]", "duplicates an earlier blob; blob ids must stay unique")
    # The rebuilt file is stamped with this mnrt's format version, schema hash and integrity,
    # and verified as a file read from disk would be (strings from the document included).
    built = LightBinary.build(
        root.commands or [],
        blobs,
        producer=root.producer or "",
        metadata=root.metadata or MetadataT(),
        device=root.device or DeviceDescriptionT(),
        inputs=None if root.inputs is None else [int(i) for i in root.inputs],
        outputs=None if root.outputs is None else [int(i) for i in root.outputs],
        fingerprints=[
            Fingerprint(
                t.command, t.kernel, t.output, Stats(t.hash, t.min, t.max, t.mean, t.nonfinite)
            )
            for t in root.fingerprints or ()
        ],
        fingerprint_sample=Sample(root.fingerprintRuns, root.fingerprintRun),
    )
    return LightBinary(built.to_bytes())


def _plain_name(name: Any) -> bool:
    """A file name in the JSON file's folder: no path separators, not '.' or '..'."""
    return (
        isinstance(name, str) and bool(re.fullmatch(r"[\w.-]+", name)) and name not in (".", "..")
    )


def blob_base(doc: Any, json_dir: Path) -> Path:
    """Where a document's blob files are: its 'blob_dir' (removed from `doc`), a folder
    next to the JSON file, or that file's own folder."""
    if not isinstance(doc, dict) or "blob_dir" not in doc:
        return json_dir
    name = doc.pop("blob_dir")
    if not _plain_name(name) or (json_dir / name).is_symlink():
        raise _bad(
            "$.blob_dir", f"{name!r} must be the plain name of a folder next to the JSON file"
        )
    return json_dir / name


def loads(text: bytes, source: Path) -> Any:
    """Parse a JSON document, refusing what Python's json would take silently or fail on
    with something other than an MnrtError: duplicate keys (which one counts?), integers too
    long to convert, nesting too deep to parse."""

    def unique(pairs: list[tuple[str, Any]]) -> dict:
        doc: dict[str, Any] = {}
        for key, value in pairs:
            if key in doc:
                raise InvalidBinaryError(f"{source}: a JSON object has key {key!r} twice")
            doc[key] = value
        return doc

    try:
        return json.loads(text.decode("utf-8"), object_pairs_hook=unique)
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
        why = str(e)
        if "int_max_str_digits" in why:  # Python's hint is for programmers, not for this
            why = "it holds an integer of more than 4300 digits"
        raise InvalidBinaryError(f"{source} is neither a light binary nor JSON: {why}") from None
    except RecursionError:
        raise InvalidBinaryError(f"{source}: JSON is nested too deeply") from None


_BLOB_KEYS = {"id", "size", "hash", "base64", "file"}


def _check_keys(doc: dict, path: str) -> None:
    """A document's object keys are strings (a dict built in Python may hold others)."""
    if not all(isinstance(k, str) for k in doc):
        raise _bad(path, "object keys must be strings")


def _blob_data(entry: Any, i: int, base_dir: Path | None) -> bytes:
    where = f"$.blobs[{i - 1}]"
    if not isinstance(entry, dict) or type(entry.get("id")) is not int or entry["id"] != i:
        raise _bad(where, f"expected an object with id {i}")
    _check_keys(entry, where)
    extra = sorted(set(entry) - _BLOB_KEYS)
    if extra:
        raise _bad(where, f"unknown field(s) {', '.join(extra)} in a blob")
    if "base64" in entry:
        try:
            data = base64.b64decode(entry["base64"], validate=True)
        except (ValueError, TypeError):
            raise _bad(where, "base64 is not valid") from None
    elif "file" in entry:
        name = entry["file"]
        if base_dir is None or not _plain_name(name):
            raise _bad(where, f"blob file {name!r} must be a plain name next to the JSON file")
        try:
            with open_regular(base_dir / name, "a blob file", follow_links=False) as f:
                data = f.read()
        except MnrtError as e:
            raise _bad(where, str(e)) from None
    else:
        raise _bad(where, "needs 'base64' or 'file'")
    size = entry.get("size", len(data))
    if type(size) is not int or size != len(data):
        raise _bad(where, f"size {_show(size)} is not the {len(data)} bytes of its data")
    expected = entry.get("hash")
    if expected is not None and not isinstance(expected, str):
        raise _bad(where, "hash must be a string such as '0x0123456789abcdef'")
    if expected is not None and f"{xxhash.xxh3_64_intdigest(data):#018x}" != expected:
        raise _bad(where, "data does not match its hash")
    return data
