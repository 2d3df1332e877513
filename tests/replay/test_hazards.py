"""Races between queues (replay/hazards.py): found statically, against a brute-force
happens-before graph; refused by capture(verify=True), listed by `mnrt verify`, named in a
failed replay's report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from binaries import RELAY_N, perturbed, relay, relay_session
from cli_harness import invoke_cli
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.replay.hazards import races
from mnrt.replay.plan import program_buffers, validate
from mnrt.replay.reduce import kernel_count, reduce
from mnrt.replay.trim import TrimError, check_replays

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def kind_at(binary: mnrt.LightBinary, index: int) -> int:
    return binary.commands[index].cmdType


def test_a_copy_that_does_not_wait_for_the_reader_races_with_it():
    binary = relay(ordered=False)
    plan = validate(binary, blobs=False)
    found = races(plan)
    assert [(r.buffer_name, r.first_writes, r.second_writes) for r in found] == [
        ("r", False, True),
        ("r", False, True),
    ]  # the second and third copies, each with the program before it
    for race in found:
        assert kind_at(binary, race.first) == U.EnqueueProgram
        assert kind_at(binary, race.second) == U.CopyBuffer
    text = found[0].describe(plan)
    assert text.startswith("buffer 'r': command ") and "(EnqueueProgram 'step' on device 1 " in text
    assert "(CopyBuffer on device 0 queue 0) writes it, and no event orders them" in text
    assert races(validate(relay(ordered=True), blobs=False)) == []


def test_every_committed_sample_is_race_free():
    paths = sorted(SAMPLES.glob("*.mnlb"))
    assert len(paths) >= 4
    for path in paths:
        assert races(validate(mnrt.LightBinary.load(path), blobs=False)) == [], path


# --- against a brute-force happens-before graph ---------------------------------------------

_RARELY = st.sampled_from([False, False, False, True])  # a host wait orders everything
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("program"), st.integers(0, 2), st.permutations(range(3))),
        st.tuples(st.just("write"), st.integers(0, 2), st.integers(0, 2), _RARELY),
        st.tuples(st.just("read"), st.integers(0, 2), st.integers(0, 2), _RARELY),
        st.tuples(st.just("event"), st.integers(0, 2), st.integers(0, 2)),
        st.tuples(st.just("event"), st.integers(0, 2), st.integers(0, 2)),
        st.tuples(st.just("finish"), st.integers(0, 2)),
    ),
    max_size=14,
)


def captured(ops) -> mnrt.LightBinary:
    """One device, three queues and three buffers; `ops` enqueued in order (a program adds
    two buffers into the third)."""
    mnrt.begin_capture(goldens=False)
    try:
        with mnrt.open_device(0) as dev:
            queues = [dev.command_queue(i) for i in range(3)]
            bufs = [dev.create_buffer((4,), "float", name=f"b{i}") for i in range(3)]
            add = dev.create_program([mnrt.Kernel("add", ["x", "y"], ["z"])], name="add")
            for op in ops:
                q = queues[op[1]]
                if op[0] == "program":
                    x, y, z = (bufs[i] for i in op[2])
                    q.enqueue_program(add, {"x": x, "y": y, "z": z})
                elif op[0] == "write":
                    q.enqueue_write_buffer(bufs[op[2]], np.ones(4, np.float32), blocking=op[3])
                elif op[0] == "read":
                    q.enqueue_read_buffer(bufs[op[2]], blocking=op[3])
                elif op[0] == "event":
                    queues[op[2]].wait_event(q.record_event())
                else:
                    q.finish()
            for q in queues:
                q.finish()
    finally:
        binary = mnrt.end_capture()
    return binary


def brute_force(binary: mnrt.LightBinary) -> set[tuple[int, int, int]]:
    """Every (first, second, buffer) of two commands of two queues that touch one buffer,
    one writing it, with no path between them in the graph of what orders commands."""
    plan = validate(binary, blobs=False)
    on_queue = []  # (index, queue, reads, writes)
    for i, command in enumerate(binary.commands):
        kind, c = command.cmdType, command.cmd
        if kind == U.EnqueueProgram:
            kernels = program_buffers(plan, c.programId, c.bufferIds)
            on_queue.append((i, c.queueId, kernels[0][0], kernels[0][1]))
        elif kind == U.WriteBuffer:
            on_queue.append((i, c.queueId, set(), {c.bufferId}))
        elif kind == U.ReadBuffer:
            on_queue.append((i, c.queueId, {c.bufferId}, set()))
        elif kind in (U.RecordEvent, U.WaitEvent, U.Finish):
            on_queue.append((i, c.queueId, set(), set()))
    n = len(on_queue)
    after = [[False] * n for _ in range(n)]  # after[a][b]: a runs before b
    recorded = {}
    for a, (i, q, _, _) in enumerate(on_queue):
        c = binary.commands[i].cmd
        kind = binary.commands[i].cmdType
        if kind == U.RecordEvent:
            recorded[c.eventId] = a
        waits = kind == U.Finish or getattr(c, "blocking", False)
        for b in range(a + 1, n):
            j, other, _, _ = on_queue[b]
            wait = binary.commands[j].cmdType == U.WaitEvent and binary.commands[j].cmd.eventId
            if other == q or waits or (wait and recorded.get(wait) == a):
                after[a][b] = True
    for k in range(n):  # transitive closure
        for a in range(n):
            if after[a][k]:
                row, via = after[a], after[k]
                for b in range(n):
                    if via[b]:
                        row[b] = True
    found = set()
    for a, (i, q, reads_a, writes_a) in enumerate(on_queue):
        for b in range(a + 1, n):
            j, other, reads_b, writes_b = on_queue[b]
            if other == q or after[a][b]:
                continue
            for gid in (writes_a & (reads_b | writes_b)) | (reads_a & writes_b):
                found.add((i, j, gid))
    return found


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_races_are_found_where_brute_force_finds_them(ops):
    """Every race reported is one (no false alarm), and every buffer with a race has one
    reported (the check keeps the last write and each queue's last read of a buffer, so it
    reports the race nearest each access rather than every racing pair)."""
    binary = captured(ops)
    truth = brute_force(binary)
    found = races(validate(binary, blobs=False), limit=10**6)
    assert {(r.first, r.second, r.buffer) for r in found} <= truth
    assert {r.buffer for r in found} == {gid for _, _, gid in truth}


# --- where users meet them --------------------------------------------------------------------


def test_capture_verify_refuses_a_racy_capture_naming_the_race(tmp_path):
    path = tmp_path / "racy.mnlb"
    with pytest.raises(mnrt.CaptureVerificationError) as refused:  # noqa: SIM117
        with mnrt.capture(path, verify=True):
            relay_session(ordered=False)
    message = str(refused.value)
    assert "queues race" in message and "buffer 'r': command " in message
    assert "record an event on the queue of command" in message and "nothing was saved" in message
    assert not path.exists()
    with mnrt.capture(path, verify=True):
        relay_session(ordered=True)
    assert path.exists()


def test_mnrt_verify_lists_the_races(tmp_path):
    path = tmp_path / "racy.mnlb"
    relay(ordered=False).save(path)
    code, out = invoke_cli("verify", path)
    assert code == 0, out  # a racy binary is still a valid one
    lines = out.splitlines()
    assert lines[0].startswith("OK: ")
    assert [line.split(":")[0] for line in lines[1:3]] == ["race", "race"]
    assert lines[3].startswith("2 race(s): its results may differ from run to run")
    code, out = invoke_cli("verify", path, "--json")
    doc = json.loads(out)
    assert [(r["buffer_name"], r["second_writes"]) for r in doc["races"]] == [("r", True)] * 2
    relay(ordered=True).save(path)
    code, out = invoke_cli("verify", path, "--json")
    assert json.loads(out)["races"] == []


def test_a_failed_replay_of_a_racy_binary_says_so():
    racy, ordered = relay(ordered=False), relay(ordered=True)
    wrong = {"o": np.zeros((4, RELAY_N), np.float32)}
    report = mnrt.replay(racy, expected=wrong)
    assert not report.passed
    assert report.race.startswith("the binary's queues race")
    assert report.to_dict()["race"] == report.race and f"note: {report.race}" in report.summary()
    report = mnrt.replay(ordered, expected=wrong)
    assert not report.passed and report.race is None and "race" not in report.to_dict()


def test_reduce_warns_that_a_racy_binarys_failure_may_come_and_go():
    binary = relay(ordered=False)
    v = next(g for g, b in validate(binary, blobs=False).buffers.items() if b.name == "v")
    with pytest.warns(UserWarning, match=r"queues race.*may come and go"):
        result = reduce(perturbed(binary, v))  # fails whichever order the queues run in
    assert kernel_count(result.binary) == 1


def test_a_slice_of_a_racy_binary_that_fails_its_check_names_the_race():
    """trim and optimize replay what they write before writing it (check_replays): when
    that fails on a racy binary, the race is the first suspect, and the error says so."""
    binary = relay(ordered=False)
    v = next(g for g, b in validate(binary, blobs=False).buffers.items() if b.name == "v")
    with pytest.raises(TrimError, match=r"does not reproduce its goldens.*queues race"):
        check_replays(perturbed(binary, v), "the slice", TrimError)


def test_a_failed_check_names_the_original_binarys_race_when_the_slice_has_none():
    """A slice may leave the racing pair out, yet its snapshot came from replaying them:
    the error then names the race of the binary it was cut from."""
    ordered = relay(ordered=True)
    v = next(g for g, b in validate(ordered, blobs=False).buffers.items() if b.name == "v")
    failing = perturbed(ordered, v)
    with pytest.raises(TrimError) as caught:
        check_replays(failing, "the slice", TrimError)
    assert "race" not in str(caught.value)
    source = validate(relay(ordered=False), blobs=False)
    with pytest.raises(TrimError, match=r"differ\); the original binary's queues race"):
        check_replays(failing, "the slice", TrimError, source)
