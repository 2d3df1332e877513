"""Timeline: the modelled device timeline, one row per device and queue (and a link row per
device that receives copies), copies and event waits drawn as arrows, with the Perfetto trace
to download."""

from __future__ import annotations

from typing import Any

from ..artifacts import Artifacts

TITLE = "Timeline"
COLORS = {
    "program": "#264653",
    "trace": "#2a9d8f",
    "replay_trace": "#2a9d8f",
    "write": "#8ab17d",
    "read": "#e9c46a",
    "copy": "#f4a261",
    "record_event": "#e76f51",
    "wait_event": "#9d4edd",
}


def _row(device: int, queue: int) -> str:
    return f"device {device} / queue {queue}"


def _link_row(device: int) -> str:
    return f"device {device} / link in"


def _figure(timeline: Any) -> dict[str, Any]:
    by_kind: dict[str, dict[str, list]] = {}
    rows: set[str] = set()
    at: dict[int, tuple[str, float, float]] = {}  # span key -> (row, start us, end us)
    for span in timeline.spans:
        start, end = timeline.start_s[span.key] * 1e6, timeline.end_s[span.key] * 1e6
        row = _row(span.device, span.queue)
        at[span.key] = (row, start, end)
        placed = [row]
        if span.link is not None:
            placed.append(_link_row(span.link[1]))
        for where in placed:
            rows.add(where)
            t = by_kind.setdefault(span.kind, {"y": [], "base": [], "x": [], "text": []})
            t["y"].append(where)
            t["base"].append(start)
            t["x"].append(max(end - start, 1e-6))
            t["text"].append(f"{span.name}<br>{end - start:.3f} us, {span.energy_j * 1e6:.3f} uJ")
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "orientation": "h",
            "name": kind,
            "y": t["y"],
            "base": t["base"],
            "x": t["x"],
            "hovertext": t["text"],
            "hoverinfo": "text",
            "marker": {"color": COLORS.get(kind, "#999999")},
        }
        for kind, t in by_kind.items()
    ]
    arrows = []
    for span in timeline.spans:  # copies: from the sending queue to the receiving link row
        if span.link is not None:
            row, start, end = at[span.key]
            arrows.append(("copy", (row, start), (_link_row(span.link[1]), end)))
    for flow in timeline.flows:
        if flow.from_key in at and flow.to_key in at:
            src, dst = at[flow.from_key], at[flow.to_key]
            arrows.append((flow.kind, (src[0], src[2]), (dst[0], dst[1])))
    for kind in sorted({a[0] for a in arrows}):
        x: list[float | None] = []
        y: list[str | None] = []
        for _, (r0, t0), (r1, t1) in (a for a in arrows if a[0] == kind):
            x += [t0, t1, None]
            y += [r0, r1, None]
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{kind} arrows",
                "x": x,
                "y": y,
                "line": {"color": "#e76f51" if kind == "event" else "#f4a261", "dash": "dot"},
                "marker": {"symbol": "arrow", "angleref": "previous", "size": 10},
                "hoverinfo": "skip",
            }
        )
    order = sorted(rows, key=lambda r: [int(p) if p.isdigit() else p for p in r.split()])
    return {
        "id": "timeline",
        "data": data,
        "layout": {
            "title": {"text": "Modelled timeline (us from the first command)"},
            "barmode": "overlay",
            "xaxis": {"title": {"text": "us"}},
            "yaxis": {"categoryorder": "array", "categoryarray": order[::-1]},
            "margin": {"l": 170},
            "height": 200 + 48 * len(order),
        },
    }


def build(art: Artifacts) -> dict[str, Any]:
    run = art.run_report
    if art.binary_path is None:  # a run report whose binary is gone: its totals only
        modelled = (run or {}).get("modelled")
        return {"modelled": modelled, "as_run": (run or {}).get("modelled_as_run"), "trace": False}
    replayed = art.replayed
    timeline = replayed.timeline
    return {
        "modelled": replayed.report.get("modelled"),
        "as_run": replayed.report.get("modelled_as_run"),
        "spans": len(timeline.spans) if timeline else 0,
        "trace": True,
        "charts": [_figure(timeline)] if timeline and timeline.spans else [],
    }
