"""The report's modelled timelines (`report.timeline`, `report.modelled`; built by
mnrt/replay/modelled.py): spans on the captured devices and queues, copies priced for their
captured ends, waits after their records; one device's single queue takes its device time."""

from __future__ import annotations

import pytest
from binaries import small_capture, three_device_capture

import mnrt


def _by_kind(timeline):
    by_kind = {}
    for s in timeline.spans:
        by_kind.setdefault(s.kind, []).append(s)
    return by_kind


def test_one_queue_on_one_device_takes_its_device_time():
    report = mnrt.replay(small_capture())
    timeline = report.timeline
    assert timeline.makespan_s == pytest.approx(report.device_time_s)
    assert timeline.energy_j == pytest.approx(report.energy_j)
    assert timeline.bubble_fraction == pytest.approx(0.0)
    assert [s.kind for s in timeline.spans] == ["write", "program", "read"]
    assert report.modelled == timeline.to_dict() == report.modelled_as_run


def test_spans_sit_on_the_captured_devices_with_copies_on_the_link():
    timeline = mnrt.replay(three_device_capture()).timeline
    by_kind = _by_kind(timeline)
    assert {(s.device, s.queue) for s in timeline.spans} == {(0, 0), (1, 0), (1, 1), (2, 0)}
    pushed, pulled = sorted(by_kind["copy"], key=lambda s: s.device)
    assert (pushed.device, pushed.link) == (0, (0, 1))  # on the sender's queue
    assert (pulled.device, pulled.link) == (1, (2, 1))  # on the receiver's
    assert pulled.duration_s == mnrt.MNCORE2.copy_cost(2, 1, 64 * 64 * 4).time_s
    records = {s.key for s in by_kind["record_event"]}
    assert len(by_kind["wait_event"]) == 3
    assert all(len(w.after) == 1 and w.after[0] in records for w in by_kind["wait_event"])
    add = next(s for s in by_kind["program"] if s.device == 1)
    assert timeline.start_s[add.key] >= max(timeline.end_s[c.key] for c in by_kind["copy"])
    assert sorted(f.kind for f in timeline.flows) == ["event"] * 3


def test_folded_onto_one_device_the_copies_are_local_and_cheaper():
    report = mnrt.replay(three_device_capture(), devices=1)
    captured, as_run = report.timeline, report.timeline_as_run
    assert [d.index for d in captured.devices] == [0, 1, 2]
    assert len(as_run.devices) == 1
    assert all(s.link is None for s in as_run.spans)
    copies = [s for s in as_run.spans if s.kind == "copy"]
    assert all(s.duration_s == mnrt.MNCORE2.local_copy_cost(s.nbytes).time_s for s in copies)
    assert as_run.energy_j < captured.energy_j


def test_a_device_waiting_for_another_draws_its_static_power():
    """Device 1 waits for device 0's copy: the bubble costs energy as well as time."""
    timeline = mnrt.replay(three_device_capture()).timeline
    spans = {d.index: [s for s in timeline.spans if s.device == d.index] for d in timeline.devices}
    for d in timeline.devices:
        idle_s = timeline.makespan_s - d.busy_s
        assert d.idle_energy_j == pytest.approx(mnrt.MNCORE2.static_power_w * idle_s)
        assert d.energy_j == pytest.approx(
            sum(s.energy_j for s in spans[d.index]) + d.idle_energy_j
        )
    assert timeline.idle_energy_j > 0 and timeline.bubble_fraction > 0
    assert timeline.energy_j == pytest.approx(
        sum(s.energy_j for s in timeline.spans) + timeline.idle_energy_j
    )
