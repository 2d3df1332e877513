"""Graphs on disk: the structure as JSON, parameters in one .npz. What codegen_dir holds, so
that a compiled graph can be loaded again without compiling, and what the compile cache
hashes."""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import xxhash

from ..device.dtypes import dtype as resolve_dtype
from ..errors import InvalidArgumentError, MnrtError
from ..format.files import open_regular, write_atomically, write_atomically_with
from ..format.npy import read_npy_header
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
                "view": None if v.view is None else list(v.view),
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
        h.update(np.ascontiguousarray(graph.values[name].data))  # its bytes, not a copy
    return h.hexdigest()


def save(graph: Graph, folder: Path, stem: str) -> dict[str, tuple[int, int]]:
    """Write the graph's structure ({stem}.json) and weights ({stem}.params.npz); returns
    where each parameter's data lies in the archive (see save_arrays), by value name."""
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(folder / f"{stem}.json", json.dumps(to_json(graph), indent=1).encode())
    names = {f"p{i}": n for i, n in enumerate(graph.params)}
    stored = save_arrays(
        folder / f"{stem}.params.npz", {key: graph.values[n].data for key, n in names.items()}
    )
    return {names[key]: where for key, where in stored.items()}


def save_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> dict[str, tuple[int, int]]:
    """Arrays in an .npz that np.load reads back by name, whatever the names: np.savez
    takes them as keyword arguments, so an input named 'file' or 'allow_pickle' would clash
    with its own parameters. Returns (offset, length) of each array's bytes in the file, in
    C order, for those stored so (all but Fortran-ordered ones): the archive is
    uncompressed, so other files can refer to them there (model.onnx's weights)."""
    where: dict[str, tuple[int, int]] = {}

    def fill(file: BinaryIO) -> None:
        with zipfile.ZipFile(file, "w") as z:
            for name, array in arrays.items():
                array = np.asanyarray(array)
                with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                    _write_npy(f, array)
                    # The data is the last thing written, straight through (ZIP_STORED).
                    if array.flags.c_contiguous or not array.flags.f_contiguous:
                        where[name] = (file.tell() - array.nbytes, array.nbytes)

    write_atomically_with(path, fill)  # streamed: the weights are not copied into memory
    return where


def _write_npy(f: BinaryIO, array: np.ndarray) -> None:
    """np.lib.format.write_array, the same bytes; a C-contiguous array of a plain dtype is
    written from its own memory, where write_array copies it chunk by chunk first (VGG-19:
    548 MB copied into fresh memory for nothing)."""
    if array.flags.c_contiguous and array.dtype.isbuiltin == 1 and array.itemsize:
        try:
            np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        except ValueError:  # a header too long for version 1.0: write_array picks one
            pass
        else:
            f.write(array.reshape(-1).view(np.uint8))
            return
    np.lib.format.write_array(f, array, allow_pickle=False)


_MAX_GRAPH_JSON = 1 << 28  # bytes: a graph's structure; its weights are in the .npz


def load(folder: Path, stem: str) -> Graph:
    """The graph a folder holds (a codegen_dir or a cache entry), checked as untrusted: any
    file or field that is not what `save` writes is an InvalidArgumentError naming the
    folder, never another exception, a hang or an allocation the files do not justify."""
    try:
        with open_regular(folder / f"{stem}.json", "a graph file") as f:
            text = f.read(_MAX_GRAPH_JSON + 1)
        if len(text) > _MAX_GRAPH_JSON:
            raise ValueError(f"{stem}.json is larger than {_MAX_GRAPH_JSON} bytes")
        graph = _graph_from_json(json.loads(text))
        params = [n for n, v in graph.values.items() if v.role == PARAM]
        arrays = read_arrays(
            folder / f"{stem}.params.npz",
            {f"p{i}": graph.values[n].shape for i, n in enumerate(params)},
        )
        for i, name in enumerate(params):
            graph.values[name].data = arrays[f"p{i}"]
        graph.verify()
    except MnrtError as e:
        raise InvalidArgumentError(
            f"{folder} does not hold a compiled graph '{stem}': {e}"
        ) from None
    except (
        OSError, ValueError, TypeError, KeyError, AttributeError, OverflowError,
        RecursionError, EOFError, zipfile.BadZipFile,
    ) as e:  # fmt: skip
        raise InvalidArgumentError(
            f"{folder} does not hold a compiled graph '{stem}' "
            f"({type(e).__name__}: {str(e)[:200]}); compile the model again"
        ) from None
    return graph


def _graph_from_json(doc: Any) -> Graph:
    def names(value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise TypeError(f"expected a list of names, got {str(value)[:80]}")
        return value

    if not isinstance(doc, dict) or not isinstance(doc.get("values"), dict):
        raise TypeError("the graph is not an object with values")
    graph = Graph(str(doc["name"]), inputs=names(doc["inputs"]), outputs=names(doc["outputs"]))
    for name, v in doc["values"].items():
        shape = v["shape"]
        if shape is not None and not (
            isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
        ):
            raise TypeError(f"value {name!r} has shape {str(shape)[:80]}")
        for key in ("role", "location", "layout"):
            if v[key] is not None and not isinstance(v[key], str):
                raise TypeError(f"value {name!r} has {key} {str(v[key])[:80]}")
        view = v.get("view")
        if view is not None and not (
            isinstance(view, list)
            and len(view) == 2
            and isinstance(view[0], str)
            and type(view[1]) is int
        ):
            raise TypeError(f"value {name!r} has view {str(view)[:80]}")
        graph.values[name] = Value(
            name,
            None if shape is None else tuple(shape),
            None if v["dtype"] is None else resolve_dtype(v["dtype"]),
            v["role"],
            v["location"],
            v["layout"],
            view=None if view is None else (view[0], view[1]),
        )
    nodes = doc["nodes"]
    if not isinstance(nodes, list):
        raise TypeError("nodes is not a list")
    for n in nodes:
        if not isinstance(n["op"], str) or not isinstance(n["attrs"], dict):
            raise TypeError(f"node {str(n)[:80]} has a bad op or attrs")
        graph.nodes.append(
            Node(n["op"], names(n["inputs"]), names(n["outputs"]), n["attrs"], str(n["name"]))
        )
    return graph


def read_arrays(path: Path, shapes: Mapping[str, tuple[int, ...] | None]) -> dict[str, np.ndarray]:
    """The arrays of an .npz, exactly the names of `shapes`, each checked against its shape
    from its header, before its data is read: a hostile archive (a member that inflates to
    gigabytes, or whose header claims more) costs no more than the graph says it should."""
    with open_regular(path, "an .npz archive") as f, zipfile.ZipFile(f) as z:
        members = {i.filename: i for i in z.infolist()}
        if set(members) != {f"{k}.npy" for k in shapes}:
            raise ValueError(
                f"{path.name} holds {sorted(members)[:10]}, expected "
                f"{sorted(f'{k}.npy' for k in shapes)[:10]}"
            )
        arrays = {}
        for key, shape in shapes.items():
            with z.open(members[f"{key}.npy"]) as member:
                got, fortran, dtype = read_npy_header(member)
                if dtype.hasobject or (shape is not None and tuple(got) != tuple(shape)):
                    raise ValueError(
                        f"{path.name}: {key} is {dtype}{list(got)}, the graph says {shape}"
                    )
                data = member.read(math.prod(got) * dtype.itemsize)
            order = "F" if fortran else "C"
            arrays[key] = np.frombuffer(data, dtype).reshape(got, order=order).copy()
        return arrays
