"""The shapes the dashboard's pages rely on in the JSON documents it reads from PATH: the
compile report (report.json), a run report, graph.json and a Perfetto trace.

mnrt writes these files, but PATH is anybody's folder, and a document edited into another
shape (a list where a page iterates objects, a string where it adds numbers) must be
refused with a page that names the field (422), not break a page with a TypeError (500).
A shape lists only what some page iterates, indexes, hashes or computes with; fields a page
only shows may hold anything, and fields a shape does not name are not looked at, so the
documents of an older or newer mnrt still load."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# What a page adds or compares (bool is an int in Python, and in JSON a number's stand-in).
NUMBER = (int, float)
NUMBER_OR_NULL = (*NUMBER, type(None))
# What a page makes a dict key of or sorts by, besides showing it.
KEY = (str, int, float, type(None))
TEXT = (str,)


@dataclass(frozen=True)
class Obj:
    """A JSON object whose named `fields`, where present, have their shapes, and whose
    every value has the shape `each` (when given); or null where `null`."""

    fields: Mapping[str, Shape] = field(default_factory=dict)
    each: Shape | None = None
    null: bool = False


@dataclass(frozen=True)
class Arr:
    """A JSON array of items of one shape (anything, when `item` is None); or null where
    `null`."""

    item: Shape | None = None
    null: bool = False


Shape = tuple[type, ...] | Obj | Arr


def mismatch(doc: Any, shape: Shape, at: str = "") -> str | None:
    """Where `doc` first departs from `shape`, said as 'layers[3].outputs is a number, not
    an array'; None where it does not."""
    if isinstance(shape, tuple):
        if isinstance(doc, shape) and not (isinstance(doc, bool) and shape == NUMBER):
            return None
        return _said(doc, at, " or ".join(dict.fromkeys(_KIND[t] for t in shape)))
    if doc is None and shape.null:
        return None
    if isinstance(shape, Arr):
        if not isinstance(doc, list):
            return _said(doc, at, "an array")
        if shape.item is not None:
            for i, item in enumerate(doc):
                found = mismatch(item, shape.item, f"{at}[{i}]")
                if found:
                    return found
        return None
    if not isinstance(doc, dict):
        return _said(doc, at, "an object")
    for name, inner in shape.fields.items():
        if name in doc:
            found = mismatch(doc[name], inner, f"{at}.{name}" if at else name)
            if found:
                return found
    if shape.each is not None:
        for name, value in doc.items():
            found = mismatch(value, shape.each, f"{at}.{name}" if at else name)
            if found:
                return found
    return None


_KIND = {
    int: "a number",
    float: "a number",
    str: "a string",
    bool: "true or false",
    type(None): "null",
    list: "an array",
    dict: "an object",
}


def _said(doc: Any, at: str, expected: str) -> str:
    found = _KIND.get(type(doc), type(doc).__name__)
    return f"{at or 'the document'} is {found}, not {expected}"


def _measure(*names: str) -> dict[str, Shape]:
    return dict.fromkeys(names, NUMBER)


# report.json (compiler/codegen.py `report`; a pipelined compile's has no layers or total).
COMPILE_REPORT = Obj(
    {
        "phases": Arr(
            Obj(
                {
                    "seconds": NUMBER_OR_NULL,
                    "accuracy": Obj({"outputs": Obj(each=Obj(), null=True)}, null=True),
                    "account": Obj(null=True),
                }
            )
        ),
        "layers": Arr(Obj({"name": KEY, "outputs": Arr(), "device_time_s": NUMBER_OR_NULL})),
        "total": Obj(),
    }
)

# `mnrt run --report` (runner/report.py): the checks by name, the modelled topology.
RUN_REPORT = Obj(
    {
        "checks": Arr(Obj({"name": KEY})),
        "modelled": Obj({"devices": Arr(Obj())}, null=True),
        "modelled_as_run": Obj(null=True),
    }
)

# graph.json (compiler/serialize.py): the nodes the Nodes page lists.
GRAPH = Obj(
    {"nodes": Arr(Obj({"name": KEY, "attrs": Obj(null=True), "inputs": Arr(), "outputs": Arr()}))}
)

# A Perfetto trace (`mnrt run --profile`): the kernels of its modelled tracks, with costs.
TRACE = Obj(
    {
        "traceEvents": Arr(
            Obj(
                {
                    "name": TEXT,
                    "pid": KEY,
                    "tid": KEY,
                    "args": Obj(
                        {
                            **_measure("modelled_us", "energy_uj", "flops", "dram_bytes"),
                            "inputs": Arr(TEXT),
                            "outputs": Arr(TEXT),
                            "attrs": Obj(),
                        },
                        null=True,
                    ),
                }
            )
        )
    }
)
