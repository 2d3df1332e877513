"""Graph: the ONNX files of the codegen_dir in Netron (the `netron` package's viewer, served
by the dashboard itself, so it works offline)."""

from __future__ import annotations

from typing import Any

from ..artifacts import Artifacts

TITLE = "Graph"


def build(art: Artifacts) -> dict[str, Any]:
    return {"models": art.onnx_files}
