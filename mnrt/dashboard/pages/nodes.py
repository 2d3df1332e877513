"""Nodes: a plain table of every graph node (or, for a binary, every program's kernels),
searchable in the page, light enough for graphs Netron is slow on."""

from __future__ import annotations

import json
from typing import Any

from ..artifacts import Artifacts, CorruptArtifactError

TITLE = "Nodes"


def _binary_attrs(attrs: list[dict]) -> str:
    out = []
    for a in attrs:
        value = next((a[k] for k in ("ints", "floats", "s") if k in a), None)
        if value is None:
            value = a.get("f") if a.get("kind") == "Float" else a.get("i")
        out.append(f"{a.get('name')}={value}")
    return ", ".join(out)


def _graph_rows(art: Artifacts, graph: dict) -> list[dict[str, Any]]:
    cost = {layer.get("name"): layer for layer in (art.compile_report or {}).get("layers", [])}
    nodes = graph.get("nodes")
    if not isinstance(nodes, list):
        raise CorruptArtifactError(f"{art.root / 'graph.json'}: no node list; compile again")
    rows = []
    for n in nodes:
        layer = cost.get(n.get("name"), {})
        attrs = n.get("attrs") or {}
        rows.append(
            {
                "name": n.get("name", ""),
                "op": n.get("op", ""),
                "inputs": ", ".join(map(str, n.get("inputs", []))),
                "outputs": ", ".join(map(str, n.get("outputs", []))),
                "attrs": ", ".join(f"{k}={json.dumps(v)}" for k, v in attrs.items()),
                "time_s": layer.get("device_time_s"),
                "bound": layer.get("bound", ""),
            }
        )
    return rows


def build(art: Artifacts) -> dict[str, Any]:
    graph = art.graph
    if graph is not None:
        return {"rows": _graph_rows(art, graph), "source": "graph.json (the graph as compiled)"}
    rows = []
    for c in art.dump["commands"]:
        cmd = c["cmd"]
        if cmd.get("type") != "CreateProgram":
            continue
        program = cmd.get("program", {})
        for i, k in enumerate(program.get("kernels", [])):
            rows.append(
                {
                    "name": f"{program.get('name', '')}[{i}]",
                    "op": k.get("op", ""),
                    "inputs": ", ".join(k.get("inputs", [])),
                    "outputs": ", ".join(k.get("outputs", [])),
                    "attrs": _binary_attrs(k.get("attrs", [])),
                    "time_s": None,
                    "bound": "",
                }
            )
    return {"rows": rows, "source": "the binary's programs"}
