"""Graphs on disk: the structure as JSON, parameters in one .npz. What codegen_dir holds, so
that a compiled graph can be loaded again without compiling, and what the compile cache
hashes."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ..device.dtypes import dtype as resolve_dtype
from ..errors import InvalidArgumentError
from .ir import PARAM, Graph, Node, Value


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def to_json(graph: Graph) -> dict:
    return {
        "name": graph.name,
        "inputs": graph.inputs,
        "outputs": graph.outputs,
        "values": {
            name: {
                "shape": None if v.shape is None else list(v.shape),
                "dtype": None if v.dtype is None else v.dtype.name,
                "role": v.role,
                "location": v.location,
                "layout": v.layout,
            }
            for name, v in graph.values.items()
        },
        "nodes": [
            {
                "op": n.op,
                "name": n.name,
                "inputs": n.inputs,
                "outputs": n.outputs,
                "attrs": {k: _plain(a) for k, a in n.attrs.items()},
            }
            for n in graph.nodes
        ],
    }


def fingerprint(graph: Graph) -> str:
    """xxh3-64 of the graph's structure and parameter bytes: the compile cache's key part."""
    h = xxhash.xxh3_64(json.dumps(to_json(graph), sort_keys=True).encode())
    for name in sorted(graph.params):
        h.update(name.encode())
        h.update(np.ascontiguousarray(graph.values[name].data).tobytes())
    return h.hexdigest()


def save(graph: Graph, folder: Path, stem: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(to_json(graph), indent=1))
    params = {f"p{i}": graph.values[n].data for i, n in enumerate(graph.params)}
    np.savez(folder / f"{stem}.params.npz", **params)


def save_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Arrays in an .npz that np.load reads back by name, whatever the names: np.savez
    takes them as keyword arguments, so an input named 'file' or 'allow_pickle' would clash
    with its own parameters."""
    with zipfile.ZipFile(path, "w") as z:
        for name, array in arrays.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(array), allow_pickle=False)


def load(folder: Path, stem: str) -> Graph:
    try:
        doc = json.loads((folder / f"{stem}.json").read_text())
        with np.load(folder / f"{stem}.params.npz") as npz:
            arrays = [npz[f"p{i}"] for i in range(len(npz.files))]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise InvalidArgumentError(
            f"{folder} does not hold a compiled graph '{stem}': {e}"
        ) from None
    graph = Graph(doc["name"], inputs=list(doc["inputs"]), outputs=list(doc["outputs"]))
    for name, v in doc["values"].items():
        graph.values[name] = Value(
            name,
            None if v["shape"] is None else tuple(v["shape"]),
            None if v["dtype"] is None else resolve_dtype(v["dtype"]),
            v["role"],
            v["location"],
            v["layout"],
        )
    for name, array in zip([n for n, v in graph.values.items() if v.role == PARAM], arrays):
        graph.values[name].data = array
    graph.nodes = [
        Node(n["op"], n["inputs"], n["outputs"], n["attrs"], n["name"]) for n in doc["nodes"]
    ]
    graph.verify()
    return graph
