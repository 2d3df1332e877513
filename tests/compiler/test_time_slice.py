"""Time slicing (compiler/time_slice.py): values larger than the chip's local memory take
time slices, bounded by CODEGEN_MAX_TIME_SLICE with an error that says what to do."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler import time_slice as T


def big_graph(rows: int):
    b = GraphBuilder("big")
    b.output(b.relu(b.input("x", (rows, 8192))), "y")
    return b.build()


def test_values_beyond_local_memory_get_time_slices_and_the_limit_holds():
    graph = big_graph(8192)  # 256 MiB of float: twice the chip's 128 MiB of LM
    found = T.slices(graph)
    assert found["x"] == 2 and sorted(found.values()) == [2, 2]  # x and relu's result
    assert T.check(graph, 2) is graph
    with pytest.raises(T.TimeSliceError, match="needs 2 time slices.*CODEGEN_MAX_TIME_SLICE=1"):
        T.check(graph, 1)
    assert T.summary(graph, 256) == {"max_time_slice": 256, "sliced_values": 2, "most_slices": 2}
    assert T.slices(big_graph(16)) == {}


def test_the_limit_comes_from_the_option_json_envs(tmp_path, monkeypatch):
    monkeypatch.delenv("CODEGEN_MAX_TIME_SLICE", raising=False)
    assert T.max_time_slice({}) == 256
    assert T.max_time_slice({"CODEGEN_MAX_TIME_SLICE": "4"}) == 4
    with pytest.raises(T.TimeSliceError, match="1 or more"):
        T.max_time_slice({"CODEGEN_MAX_TIME_SLICE": "none"})
    opts = tmp_path / "opts.json"
    opts.write_text(json.dumps({"envs": {"CODEGEN_MAX_TIME_SLICE": "0"}, "args": []}))
    b = GraphBuilder("small")
    b.output(b.relu(b.input("x", (4, 4))), "y")
    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    x = {"x": np.ones((4, 4), np.float32)}
    with pytest.raises(mnrt.InvalidArgumentError, match="CODEGEN_MAX_TIME_SLICE='0'"):
        ctx.compile(b, x, options={"option_json": str(opts)})
    ctx.compile(b, x, codegen_dir=tmp_path / "cg")
    report = json.loads((tmp_path / "cg" / "report.json").read_text())
    assert report["time_slices"] == {"max_time_slice": 256, "sliced_values": 0, "most_slices": 1}
