"""Random valid host-call sequences: capture, save, load, JSON round trip and replay all
agree with the live run."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.format import jsonio
from mnrt.host import observe

DTYPES = ["float", "half", "int32"]
UNARY = {
    "float": ["relu", "exp", "neg", "abs"],
    "half": ["relu", "tanh", "neg"],
    "int32": ["neg", "abs", "relu"],
}

step = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 3), st.integers(0, 2**31 - 1)),
    st.tuples(st.just("unary"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("add"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("read"), st.integers(0, 3), st.booleans()),
    st.tuples(
        st.just("finish"),
    ),
    st.tuples(st.just("trace"), st.integers(0, 3), st.integers(0, 3), st.integers(1, 3)),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    dtype=st.sampled_from(DTYPES),
    steps=st.lists(step, min_size=1, max_size=12),
    before=st.integers(0, 2),
)
def test_random_sessions_round_trip(dtype, steps, before, assert_nested):
    try:
        binary, live = _session(dtype, steps, before)
    finally:
        observe.install(None)
    loaded = mnrt.LightBinary(binary.to_bytes())
    again = jsonio.from_json(json.loads(jsonio.dumps(loaded)))
    assert again.to_bytes() == binary.to_bytes()
    report = mnrt.replay(loaded)
    assert report.passed, report.summary()
    # Each buffer read is one output, holding what its last read returned.
    assert list(report.outputs) == (list(live) if before != 2 else ["b0"])
    for name, got in report.outputs.items():
        np.testing.assert_array_equal(got, live[name])
    # Profiled, the replay computes the same, and its trace is well formed.
    profiled = mnrt.replay(loaded, profile=True)
    for got, want in zip(profiled.outputs.values(), report.outputs.values()):
        np.testing.assert_array_equal(got, want)
    slices = [e for e in profiled.profile.to_trace()["traceEvents"] if e["ph"] == "X"]
    assert_nested(slices)
    assert sum(
        s["pid"] == 0 and s["name"] not in ("loop 1", "verify goldens") for s in slices
    ) == len(loaded)


def _session(dtype, steps, before):
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        if before == 0:
            mnrt.begin_capture()
        bufs = [dev.create_buffer((3, 2), dtype, name=f"b{i}") for i in range(4)]
        for b in bufs:
            q.enqueue_write_buffer(b, np.ones((3, 2), bufs[0].dtype.read_dtype))
        if before == 1:
            mnrt.begin_capture()  # capture from the middle: buffers are snapshotted
        live = {}  # buffer name -> what its last read returned
        for s in steps:
            if s[0] == "write":
                rng = np.random.default_rng(s[2])
                data = (rng.standard_normal((3, 2)) * 4).astype(bufs[0].dtype.read_dtype)
                q.enqueue_write_buffer(bufs[s[1]], data)
            elif s[0] == "unary":
                op = UNARY[dtype][s[1] % len(UNARY[dtype])]
                prog = dev.create_program([mnrt.Kernel(op, ["x"], ["y"])])
                q.enqueue_program(prog, {"x": bufs[s[2]], "y": bufs[s[3]]})
            elif s[0] == "add":
                prog = dev.create_program([mnrt.Kernel("add", ["a", "b"], ["c"])])
                q.enqueue_program(prog, {"a": bufs[s[1]], "b": bufs[s[2]], "c": bufs[s[3]]})
            elif s[0] == "read":
                live[f"b{s[1]}"] = q.enqueue_read_buffer(bufs[s[1]], blocking=s[2])
            elif s[0] == "finish":
                q.finish()
            else:
                prog = dev.create_program([mnrt.Kernel("add", ["a", "b"], ["a"])])
                tid = q.begin_trace_capture()
                q.enqueue_program(prog, {"a": bufs[s[1]], "b": bufs[s[2]]})
                q.end_trace_capture(tid)
                for _ in range(s[3]):
                    q.replay_trace(tid)
                dev.release_trace(tid)
        if before == 2:
            mnrt.begin_capture()
        live["b0"] = q.enqueue_read_buffer(bufs[0])
        binary = mnrt.end_capture()
    return binary, live
