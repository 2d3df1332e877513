"""The dashboard's pages, one module each: `TITLE`, and `build(artifacts) -> dict`, the
context its template (templates/<slug>.html) renders. A page that needs a chart returns
`charts`: Plotly figures as {"id", "data", "layout"}. Adding a page = one module, one
template and one line here (the order is the navigation's)."""

from __future__ import annotations

from types import ModuleType

from . import binary, compile_status, graph, layers, layouts, nodes, perf, summary, timeline

PAGES: dict[str, ModuleType] = {
    "summary": summary,
    "compile": compile_status,
    "layers": layers,
    "perf": perf,
    "graph": graph,
    "nodes": nodes,
    "timeline": timeline,
    "layouts": layouts,
    "binary": binary,
}

__all__ = ["PAGES"]
