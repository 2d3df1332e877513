"""Binary: the light binary's header, commands, objects, blobs (sizes and compression) and
goldens with their tolerances; with a second binary, both command lists side by side,
aligned, with what differs marked."""

from __future__ import annotations

import difflib
import json
from typing import Any

from ...format.fb.Compression import Compression
from ..artifacts import Artifacts

TITLE = "Binary"
_COMPRESSION = {v: k.rstrip("_").lower() for k, v in vars(Compression).items() if k[0] != "_"}
_OBJECTS = {"OpenDevice": "device", "OpenQueue": "queue", "CreateBuffer": "buffer"}


def _details(cmd: dict[str, Any]) -> str:
    """A command's fields on one line (a program as its name and kernel count)."""
    shown = {}
    for k, v in cmd.items():
        if k == "type":
            continue
        if k == "program" and isinstance(v, dict):
            v = f"{v.get('name', '')} ({len(v.get('kernels', []))} kernels)"
        shown[k] = v
    return ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in shown.items())


def commands(dump: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"index": i, "type": c["cmd"].get("type", "?"), "details": _details(c["cmd"])}
        for i, c in enumerate(dump["commands"])
    ]


def _objects(dump: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c in dump["commands"]:
        cmd = c["cmd"]
        kind = cmd.get("type")
        if kind in _OBJECTS:
            desc = cmd.get("desc", {})
            what = (
                f"{desc.get('name', '')} {desc.get('dtype', '')}{desc.get('shape', '')}"
                if desc
                else f"index {cmd.get('index')}"
            )
            ident = cmd.get(f"{_OBJECTS[kind]}_id")
            out.append({"kind": _OBJECTS[kind], "id": ident, "what": what})
        elif kind == "CreateProgram":
            program = cmd.get("program", {})
            out.append(
                {
                    "kind": "program",
                    "id": cmd.get("program_id"),
                    "what": f"{program.get('name', '')}: "
                    + ", ".join(k.get("op", "") for k in program.get("kernels", [])),
                }
            )
    return out


def _blobs(dump: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            **b,
            "compression": _COMPRESSION.get(b.get("compression"), str(b.get("compression"))),
            "ratio": b["size"] / b["stored_size"] if b.get("stored_size") else 1.0,
        }
        for b in dump["blobs"]
    ]


def _goldens(dump: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "name": c["cmd"].get("name") or f"buffer {c['cmd'].get('buffer_id')}",
            "type": c["cmd"].get("type"),
            "blob": c["cmd"]["golden"],
            "rtol": c["cmd"].get("rtol"),
            "atol": c["cmd"].get("atol"),
        }
        for i, c in enumerate(dump["commands"])
        if c["cmd"].get("golden")
    ]


def side_by_side(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two command lists aligned (difflib over type and fields): rows of (a, b, status)."""
    keys_a = [f"{c['type']} {c['details']}" for c in a]
    keys_b = [f"{c['type']} {c['details']}" for c in b]
    rows: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for tag, i0, i1, j0, j1 in matcher.get_opcodes():
        left, right = a[i0:i1], b[j0:j1]
        for k in range(max(len(left), len(right))):
            ca = left[k] if k < len(left) else None
            cb = right[k] if k < len(right) else None
            status = (
                "same"
                if tag == "equal"
                else "changed"
                if ca and cb
                else "only A"
                if ca
                else "only B"
            )
            rows.append({"a": ca, "b": cb, "status": status})
    return rows


def build(art: Artifacts) -> dict[str, Any]:
    dump = art.dump
    own = commands(dump)
    context: dict[str, Any] = {
        "info": art.info,
        "commands": own,
        "objects": _objects(dump),
        "blobs": _blobs(dump),
        "goldens": _goldens(dump),
        "diff": None,
    }
    if art.other is not None:
        rows = side_by_side(own, commands(art.other.dump))
        context["diff"] = {
            "a": str(art.binary_path),
            "b": str(art.other.binary_path),
            "rows": rows,
            "differ": sum(r["status"] != "same" for r in rows),
        }
    return context
