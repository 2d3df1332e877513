"""`mnrt dashboard`: web pages for a codegen_dir, a light binary or a run report (summary,
compile statuses, layers, perf stats, graph, nodes, timeline, layouts, binary).

Needs the `dashboard` extra (`pip install mnrt[dashboard]`: starlette, jinja2, uvicorn,
plotly, netron); `mnrt run` and the rest of mnrt never import it."""

from __future__ import annotations

import os

from .app import create_app
from .artifacts import (
    ArtifactMissingError,
    Artifacts,
    CorruptArtifactError,
    PathRefusedError,
)
from .export import export
from .pages import PAGES
from .serve import serve

__all__ = [
    "PAGES",
    "ArtifactMissingError",
    "Artifacts",
    "CorruptArtifactError",
    "PathRefusedError",
    "create_app",
    "export",
    "open_dashboard",
    "serve",
]


def open_dashboard(path: str | os.PathLike, other: str | os.PathLike | None = None) -> Artifacts:
    """The artefacts at `path` (and a second binary `other` to compare with), for
    `create_app`, `serve` or `export`."""
    return Artifacts(path, other)
