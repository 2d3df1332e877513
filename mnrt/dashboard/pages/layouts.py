"""Layouts: the final layout of every value, the layout plan history and time slices, read
generically from what the codegen_dir holds (report.json's "layout" and any layout, plan or
time-slice file), so it shows whatever the mapping work writes."""

from __future__ import annotations

from typing import Any

from ...format.files import parse_json
from ..artifacts import Artifacts
from .common import split_described

TITLE = "Layouts"


def _values(art: Artifacts) -> list[dict[str, str]]:
    """Each value's placement and layout as the compiled graph records them."""
    rows = []
    for layer in (art.compile_report or {}).get("layers", []):
        for out in layer.get("outputs", []):
            text = str(out)
            name, _, rest = text.partition(":")
            words = rest.split()
            rows.append(
                {
                    "value": name.strip(),
                    "layer": str(layer.get("name", "")),
                    "type": words[0] if words else "",
                    "memory": next((w[1:] for w in words if w.startswith("@")), ""),
                    # the notation has spaces in it: the layout is all that follows
                    "layout": rest.partition("layout=")[2].strip(),
                }
            )
    return rows


def _file(art: Artifacts, f: dict) -> dict[str, Any]:
    """A layout file to show: JSON parsed, text as text, HTML linked and embedded."""
    name = f["name"]
    shown: dict[str, Any] = {"name": name, "bytes": f["bytes"]}
    if name.endswith((".html", ".htm")):
        shown["html"] = True
    elif f["bytes"] <= 2 << 20:
        text = art.resolve(name).read_text(errors="replace")
        if name.endswith(".json"):
            try:
                shown["json"] = parse_json(text)
            except ValueError:
                shown["text"] = text
        else:
            shown["text"] = text
    return shown


def build(art: Artifacts) -> dict[str, Any]:
    report = art.compile_report or {}
    summary = report.get("layout")
    time_slices = report.get("time_slices")  # the compile step's count and its limit
    files = [_file(art, f) for f in art.layout_files]
    values = _values(art)
    has_values = any(v["layout"] for v in values)
    return {
        "summary": summary,
        "time_slices": time_slices,
        "values": values if has_values else [],
        "files": files,
        "empty": not summary and not time_slices and not files and not has_values,
        "split": split_described,
    }
