"""What several pages derive from the artefacts: every kernel with its modelled cost, read
from the Perfetto trace's modelled tracks (the same numbers `mnrt run --profile` shows), and
its utilisation against the chip's roofline."""

from __future__ import annotations

import re
from typing import Any

from ...device.spec import MNCORE2
from ..artifacts import Artifacts

_DESCRIBED = re.compile(r"^(?P<name>.*) (?P<dtype>[A-Za-z0-9_]+)\[(?P<shape>[^\]]*)\]$")
_LAYOUT = re.compile(r"layout=(\S+)")


def split_described(text: str) -> tuple[str, str, str]:
    """'name dtype[2, 3]' (a profile's operand) -> (name, dtype, '2x3')."""
    m = _DESCRIBED.match(text)
    if m is None:
        return text, "", ""
    shape = "x".join(d.strip() for d in m["shape"].split(",") if d.strip())
    return m["name"], m["dtype"], shape or "scalar"


def roofline_s(flops: float, dram_bytes: float, dtype: str) -> float:
    """The least time the chip could take: its peak for the dtype (the matrix units' figure)
    or its DRAM bandwidth, whichever binds."""
    tflops = MNCORE2.peak_tflops.get(dtype, MNCORE2.peak_tflops["float"])
    return max(flops / (tflops * 1e12), dram_bytes / MNCORE2.dram_bandwidth)


def _modelled_tracks(trace: dict) -> set[tuple[int, int]]:
    return {
        (e.get("pid"), e.get("tid"))
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "M"
        and e.get("name") == "thread_name"
        and "modelled MN-Core time" in str((e.get("args") or {}).get("name", ""))
    }


def kernels(art: Artifacts) -> list[dict[str, Any]]:
    """Every kernel the binary ran (first loop), in order, with its modelled cost."""
    return art.cached("kernels", lambda: _kernels(art))


def _kernels(art: Artifacts) -> list[dict[str, Any]]:
    trace = art.trace
    tracks = _modelled_tracks(trace)
    rows: list[dict[str, Any]] = []
    seen_loop_end = False
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("name", "").startswith("loop ") and rows:
            seen_loop_end = True  # a second loop: its kernels repeat the first's
        if seen_loop_end:
            break
        args = e.get("args") or {}
        if e.get("ph") != "X" or "kernel" not in args or (e.get("pid"), e.get("tid")) not in tracks:
            continue
        outs = [split_described(o) for o in args.get("outputs", [])]
        ins = [split_described(i) for i in args.get("inputs", [])]
        dtype = outs[0][1] if outs else ""
        time_s = float(args.get("modelled_us", 0.0)) * 1e-6
        flops = float(args.get("flops", 0.0))
        dram = float(args.get("dram_bytes", 0.0))
        best = roofline_s(flops, dram, dtype)
        op = e.get("name", "")
        rows.append(
            {
                "index": len(rows),
                "name": f"{op}{len(rows)}",
                "op": op,
                "inputs": ", ".join(f"{n} {s}" for n, _, s in ins),
                "outputs": ", ".join(f"{n} {s}" for n, _, s in outs),
                "dtype": dtype,
                "attrs": args.get("attrs", {}),
                "layout": "",
                "time_s": time_s,
                "energy_j": float(args.get("energy_uj", 0.0)) * 1e-6,
                "flops": flops,
                "dram_bytes": dram,
                "bound": args.get("bound", ""),
                "utilisation": best / time_s if time_s > 0 else 0.0,
            }
        )
    layers = [x for x in (art.compile_report or {}).get("layers") or [] if not x.get("elided")]
    if len(layers) == len(rows):  # one kernel per layer that runs one: name them, their layouts
        for row, layer in zip(rows, layers):
            row["name"] = str(layer.get("name", row["name"]))
            found = [_LAYOUT.search(str(o)) for o in layer.get("outputs", [])]
            row["layout"] = ", ".join(m[1] for m in found if m)
    return rows


def mapping_of(row: dict[str, Any]) -> str:
    """A kernel's placement as its attributes record it: which operands stay on chip, and
    the layout its outputs were planned with."""
    parts = []
    onchip = row["attrs"].get("onchip")
    if onchip:
        parts.append(f"onchip {onchip}")
    if row["layout"]:
        parts.append(f"layout {row['layout']}")
    mapping = row["attrs"].get("mapping")
    if mapping:
        parts.append(f"mapping {mapping}")
    return "; ".join(parts)
