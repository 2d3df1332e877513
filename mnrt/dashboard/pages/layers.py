"""Layers: every kernel with its operands, dtype, mapping and layout, modelled time and
energy, and its utilisation against the chip's roofline."""

from __future__ import annotations

from typing import Any

from ..artifacts import Artifacts
from .common import kernels, mapping_of

TITLE = "Layers"


def build(art: Artifacts) -> dict[str, Any]:
    rows = [{**r, "mapping": mapping_of(r)} for r in kernels(art)]
    return {
        "rows": rows,
        "total_time_s": sum(r["time_s"] for r in rows),
        "total_energy_j": sum(r["energy_j"] for r in rows),
    }
