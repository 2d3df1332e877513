"""Perf stats: modelled time, energy and FLOPs by op type, and within an op by each
attribute's value (dtype included), each with ALL, the total, so the effect of a compile
option (which changes attributes, dtypes and mappings) shows."""

from __future__ import annotations

import json
from typing import Any

from ..artifacts import Artifacts
from .common import kernels

TITLE = "Perf stats"
ALL = "ALL"


def _add(group: dict[str, Any], row: dict[str, Any]) -> None:
    group["count"] += 1
    group["time_s"] += row["time_s"]
    group["energy_j"] += row["energy_j"]
    group["flops"] += row["flops"]


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def stats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows (op, attribute, value, count, time_s, energy_j, flops, share): ALL/ALL/ALL first,
    then for each op its ALL row and a row per (attribute, value)."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}

    def group(key: tuple[str, str, str]) -> dict[str, Any]:
        return groups.setdefault(key, {"count": 0, "time_s": 0.0, "energy_j": 0.0, "flops": 0.0})

    for r in rows:
        _add(group((ALL, ALL, ALL)), r)
        _add(group((r["op"], ALL, ALL)), r)
        _add(group((r["op"], "dtype", r["dtype"])), r)
        _add(group((ALL, "dtype", r["dtype"])), r)
        for name, v in sorted(r["attrs"].items()):
            _add(group((r["op"], name, _value(v))), r)
    total = groups.get((ALL, ALL, ALL), {"time_s": 0.0})["time_s"]
    ordered = sorted(
        groups.items(),
        key=lambda kv: (kv[0][0] != ALL, kv[0][0], kv[0][1] != ALL, kv[0][1], -kv[1]["time_s"]),
    )
    return [
        {
            "op": op,
            "attribute": attr,
            "value": value,
            **g,
            "share": g["time_s"] / total if total else 0.0,
        }
        for (op, attr, value), g in ordered
    ]


def build(art: Artifacts) -> dict[str, Any]:
    table = stats(kernels(art))
    per_op = [s for s in table if s["op"] != ALL and s["attribute"] == ALL]
    per_op.sort(key=lambda s: -s["time_s"])
    ops = [s["op"] for s in per_op]
    charts = [
        {
            "id": "time-by-op",
            "data": [
                {
                    "type": "bar",
                    "x": ops,
                    "y": [s["time_s"] * 1e6 for s in per_op],
                    "name": "time (us)",
                    "marker": {"color": "#264653"},
                }
            ],
            "layout": {
                "title": {"text": "Modelled time by op (us)"},
                "yaxis": {"title": {"text": "us"}},
                "height": 360,
            },
        },
        {
            "id": "energy-by-op",
            "data": [
                {
                    "type": "pie",
                    "labels": ops,
                    "values": [s["energy_j"] for s in per_op],
                    "hole": 0.4,
                }
            ],
            "layout": {"title": {"text": "Modelled energy by op"}, "height": 360},
        },
    ]
    return {
        "table": table,
        "ops": sorted({s["op"] for s in table}),
        "attributes": sorted({s["attribute"] for s in table}),
        "charts": charts,
    }
