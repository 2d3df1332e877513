"""Compile statuses: each compile phase of a codegen_dir, ok or not, its seconds (a phase
a compile-cache hit reused shows the seconds of the compile that stored it, which the
total leaves out) and the figures of its account."""

from __future__ import annotations

from typing import Any

from ..artifacts import Artifacts

TITLE = "Compile statuses"


def build(art: Artifacts) -> dict[str, Any]:
    report = art.compile_report
    if report is None:
        return {"phases": None, "why": f"{art.path} is a {art.kind}, not a codegen_dir"}
    phases = [
        {
            "name": p.get("name", "?"),
            "status": str(p.get("status", "?"))
            + (f" ({p['result']})" if "result" in p else "")
            + (" (cached)" if p.get("cached") else ""),
            "ok": str(p.get("status", "")) == "ok",
            "seconds": float(p.get("seconds") or 0.0),
            "cached": bool(p.get("cached")),
            "account": _figures(p.get("account")),
        }
        for p in report["phases"]
    ]
    chart = {
        "id": "phase-seconds",
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "y": [p["name"] for p in phases],
                "x": [p["seconds"] for p in phases],
                "marker": {"color": ["#2a9d8f" if p["ok"] else "#e76f51" for p in phases]},
            }
        ],
        "layout": {
            "title": {"text": "Seconds per compile phase"},
            "yaxis": {"autorange": "reversed"},
            "xaxis": {"title": {"text": "s"}},
            "margin": {"l": 140},
            "height": 120 + 24 * len(phases),
        },
    }
    return {
        "phases": phases,
        "total_s": sum(p["seconds"] for p in phases if not p["cached"]),
        "failed": sum(not p["ok"] for p in phases),
        "charts": [chart],
    }


def _figures(account: dict | None) -> list[tuple[str, object]]:
    """What a phase's account says of it (the scheduler's choice and spills, the casts
    mixed precision dropped), its plain figures only: a nested record is report.json's to
    show."""
    return [(k, v) for k, v in (account or {}).items() if isinstance(v, (str, int, float, bool))]
