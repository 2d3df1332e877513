"""A replay's queue commands as modelled-timeline spans (`mnrt.replay.timing`): on the
captured devices and queues, copies priced for their captured ends, waits after their
records; the timeline of one device's replay is its device time."""

from __future__ import annotations

import pytest
from binaries import small_capture, three_device_capture

import mnrt
from mnrt.replay.executor import Executor, Placement
from mnrt.replay.plan import validate
from mnrt.replay.timing import replay_spans


def _run(binary: mnrt.LightBinary):
    plan = validate(binary)
    executor = Executor(plan, Placement(lambda index: index, frozenset()), profiling=True)
    try:
        executor.run()
        return replay_spans(executor)
    finally:
        executor.close()


def test_one_queue_on_one_device_takes_its_device_time():
    binary = small_capture()
    rs = _run(binary)
    report = mnrt.replay(binary)
    timeline = rs.modelled()
    assert timeline.makespan_s == pytest.approx(report.device_time_s)
    assert timeline.energy_j == pytest.approx(report.energy_j)
    assert timeline.bubble_fraction == pytest.approx(0.0)
    assert [s.kind for s in rs.spans] == ["write", "program", "read"]


def test_spans_sit_on_the_captured_devices_with_copies_on_the_link():
    rs = _run(three_device_capture())
    by_kind = {}
    for s in rs.spans:
        by_kind.setdefault(s.kind, []).append(s)
    assert {(s.device, s.queue) for s in rs.spans} == {(0, 0), (1, 0), (1, 1), (2, 0)}
    pushed, pulled = sorted(by_kind["copy"], key=lambda s: s.device)
    assert (pushed.device, pushed.link) == (0, (0, 1))  # on the sender's queue
    assert (pulled.device, pulled.link) == (1, (2, 1))  # on the receiver's
    assert pulled.duration_s == mnrt.MNCORE2.copy_cost(2, 1, 64 * 64 * 4).time_s
    records = {s.key for s in by_kind["record_event"]}
    assert len(by_kind["wait_event"]) == 3
    assert all(len(w.after) == 1 and w.after[0] in records for w in by_kind["wait_event"])
    timeline = rs.modelled()
    add = next(s for s in by_kind["program"] if s.device == 1)
    assert timeline.start_s[add.key] >= max(timeline.end_s[c.key] for c in by_kind["copy"])


def test_as_run_folds_the_captured_devices_onto_the_placement():
    rs = _run(three_device_capture())
    captured = rs.modelled()
    one = rs.as_run({0: 0, 1: 0, 2: 0})
    assert [d.index for d in captured.devices] == [0, 1, 2]
    assert [d.index for d in one.devices] == [0]
    assert one.bubble_fraction <= 1.0 and one.makespan_s > 0
    # On one device the copies are local: DRAM to DRAM, cheaper than the link.
    assert one.energy_j < captured.energy_j
