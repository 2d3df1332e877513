"""Where the dashboard's static assets come from: its own CSS and script, Plotly's bundle
from the plotly wheel and Netron's viewer from the netron package (so pages work offline)."""

from __future__ import annotations

from pathlib import Path

from .artifacts import ArtifactMissingError, PathRefusedError

_OWN = Path(__file__).parent / "static"


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def netron_dir() -> Path:
    import netron

    return Path(netron.__file__).parent


def asset_path(name: str) -> Path:
    """The file behind /static/NAME: plotly.min.js or one of the dashboard's own."""
    if name == "plotly.min.js":
        return plotly_js()
    if "/" in name or "\\" in name or name.startswith("."):
        raise PathRefusedError(f"{name!r}: not a dashboard asset")
    path = _OWN / name
    if not path.is_file():
        raise ArtifactMissingError(f"{name}: no such dashboard asset")
    return path


def own_assets() -> list[Path]:
    return sorted(p for p in _OWN.iterdir() if p.is_file())
