"""Binary: the light binary's header, commands, objects, blobs (sizes and compression) and
goldens with their tolerances; with a second binary, what `mnrt diff` finds
(`mnrt.replay.diff.diff`, the same comparison `mnrt diff --json` prints) shown side by side:
the two command lists as that diff aligned them, changed fields, goldens' errors by value and
kernel fingerprints. The page aligns nothing itself: it only lays out the diff's result."""

from __future__ import annotations

import json
from typing import Any

from ...format import strict_json
from ...format.fb.Compression import Compression
from ...replay.diff import diff, summary
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
            "name": _name(dump, i),
            "type": c["cmd"].get("type"),
            "blob": c["cmd"]["golden"],
            "rtol": c["cmd"].get("rtol"),
            "atol": c["cmd"].get("atol"),
        }
        for i, c in enumerate(dump["commands"])
        if c["cmd"].get("golden")
    ]


def side_by_side(
    d: dict[str, Any], a: list[dict[str, Any]], b: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The rows of `diff(A, B)` laid out side by side: the commands the diff does not name
    (its `commands_equal` ones, in order on both sides) as "equal" rows, each change where the
    diff placed it. `a` and `b` are the two binaries' command lists as this page shows them."""
    named_a = {c["a"] for c in d["commands"] if c["a"] is not None}
    named_b = {c["b"] for c in d["commands"] if c["b"] is not None}
    equal = list(
        zip(
            (i for i in range(len(a)) if i not in named_a),
            (j for j in range(len(b)) if j not in named_b),
        )
    )
    rows: list[dict[str, Any]] = []
    k = 0

    def equal_until(side: int, stop: int) -> None:
        nonlocal k
        while k < len(equal) and equal[k][side] < stop:
            i, j = equal[k]
            rows.append({"status": "equal", "a": a[i], "b": b[j], "fields": [], "golden": None})
            k += 1

    for c in d["commands"]:
        if c["a"] is not None:
            equal_until(0, c["a"])
        else:
            equal_until(1, c["b"])
        rows.append(
            {
                "status": "moved" if c.get("moved") else c["change"],
                "a": a[c["a"]] if c["a"] is not None else None,
                "b": b[c["b"]] if c["b"] is not None else None,
                "fields": c.get("fields", []),
                "golden": c.get("golden"),
            }
        )
    equal_until(0, len(a))
    return rows


def _comparison(art: Artifacts, own: list[dict[str, Any]]) -> dict[str, Any]:
    """`mnrt diff` of the two binaries, and what the page shows of it."""
    other = art.other
    d = art.cached("diff", lambda: diff(art.binary, other.binary))
    goldens = [
        {"a": c["a"], "b": c["b"], "name": _name(art.dump, c["a"]), **c["golden"]}
        for c in d["commands"]
        if c.get("golden")
    ]
    return {
        "a": str(art.binary_path),
        "b": str(other.binary_path),
        "result": d,
        "summary": summary(d),
        "rows": side_by_side(d, own, commands(other.dump)),
        "goldens": goldens,
        "json": strict_json.dumps(d, indent=1, default=str),
    }


def _name(dump: dict[str, Any], index: int) -> str:
    cmd = dump["commands"][index]["cmd"]
    return cmd.get("name") or f"buffer {cmd.get('buffer_id')}"


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
        context["diff"] = _comparison(art, own)
    return context
