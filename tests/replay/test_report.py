"""ReplayReport: verdicts, check names, failure details and errors, for people and machines."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from binaries import perturbed

import mnrt
from mnrt.format.fb.CommandUnion import CommandUnion as U


def _strict(text: str) -> dict:
    """JSON that strict parsers accept (no NaN or Infinity literals)."""

    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _reads_twice(values_after: np.ndarray | None = None) -> mnrt.LightBinary:
    """Buffer 'y' checked twice (a read with its golden, then compare_to_golden)."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        y = dev.create_buffer((2, 3), "float", name="y")
        q.enqueue_write_buffer(y, np.arange(6, dtype=np.float32).reshape(2, 3))
        q.enqueue_read_buffer(y)
        golden = np.arange(6, dtype=np.float32).reshape(2, 3)
        if values_after is not None:
            golden = values_after
        mnrt.compare_to_golden(q, y, golden)
        return mnrt.end_capture()


def test_each_check_is_named_once_and_says_its_command():
    binary = _reads_twice()
    report = mnrt.replay(binary)
    assert [c.name for c in report.checks] == ["y", "y#2"] and report.passed
    goldens = [i for i, c in enumerate(binary.commands) if getattr(c.cmd, "golden", 0)]
    assert [c.command for c in report.checks] == goldens and len(goldens) == 2
    assert [c["command"] for c in _strict(report.to_json())["checks"]] == goldens


def test_a_failed_check_says_why_and_shows_its_worst_elements():
    wrong = np.arange(6, dtype=np.float32).reshape(2, 3)
    wrong[1, 2] = np.nan
    wrong[0, 1] = 7.0
    report = mnrt.replay(_reads_twice(wrong))
    assert not report.passed and report.verdict == "FAIL"
    check = report.checks[1]
    assert "2 of 6 elements differ" in check.message
    assert [w["index"] for w in check.worst] == [[1, 2], [0, 1]]
    assert check.worst[1] == {
        "index": [0, 1],
        "expected": 7.0,
        "actual": 1.0,
        "abs_err": 6.0,
        "rel_err": 6.0 / 7.0,
    }
    assert 0.0 <= abs(check.pcc) <= 1.0
    doc = _strict(report.to_json())
    assert doc["verdict"] == "FAIL" and doc["error"] is None
    failed = doc["checks"][1]
    assert failed["message"] and failed["worst"][0]["expected"] == "nan" and "pcc" in failed
    assert "at (0, 1): expected 7, actual 1" in report.summary()


def test_a_device_error_carries_the_report_so_far(tmp_path, failing_gather):
    path = tmp_path / "fails.mnlb"
    with mnrt.open_device(0) as dev:
        q = dev.command_queue()
        with mnrt.capture(path):
            failing_gather(dev, q)
        with contextlib.suppress(mnrt.DeviceExecutionError):
            q.finish()
    with pytest.raises(mnrt.DeviceExecutionError) as caught:
        mnrt.replay(path)
    report = caught.value.report
    assert not report.passed and report.verdict == "ERROR (DeviceExecutionError)"
    doc = _strict(report.to_json())
    assert doc["error"]["exit_code"] == 3 and "out of range" in doc["error"]["message"]
    assert doc["passed"] is False and doc["binary"] == str(path)
    # it names the binary's command (as trim and dump count), not only the queue's own count
    kinds = [c.cmdType for c in mnrt.LightBinary.load(path).commands]
    enqueue = kinds.index(U.EnqueueProgram)
    assert str(caught.value).startswith(
        f"command {enqueue} of the binary (enqueue_program, run as device 0 queue 0 command #"
    )


def test_a_device_error_met_through_an_event_names_both_commands_of_the_binary():
    """Queue 0 waits for an event of queue 1, whose gather fails (its index edited out of
    range after the capture): the replay meets the error at queue 0's wait, and names that
    wait and the failed enqueue by their place in the binary."""
    with mnrt.open_device(0) as dev:
        q0, q1 = dev.command_queue(0), dev.command_queue(1)
        mnrt.begin_capture()
        flag = dev.create_buffer((1,), "float", name="flag")
        q0.enqueue_write_buffer(flag, np.ones(1, np.float32))  # queue 0 is logged first
        data = dev.create_buffer((4,), "float", name="data")
        idx = dev.create_buffer((1,), "int32", name="idx")
        out = dev.create_buffer((1,), "float", name="out")
        gather = dev.create_program([mnrt.Kernel("gather", ["data", "idx"], ["out"])])
        q1.enqueue_write_buffer(idx, np.array([3], np.int32))
        q1.enqueue_program(gather, {"data": data, "idx": idx, "out": out})
        q0.wait_event(q1.record_event())
        q0.enqueue_write_buffer(flag, np.zeros(1, np.float32))
        q0.finish()
        binary = mnrt.end_capture()
    kinds = [c.cmdType for c in binary.commands]
    index = next(c.cmd.bufferId for c in binary.commands if c.cmdType == U.CreateBuffer
                 and c.cmd.desc.name == b"idx")  # fmt: skip
    with pytest.raises(mnrt.DeviceExecutionError) as caught:
        mnrt.replay(perturbed(binary, index, scale=4.0))  # index 12 of 4
    text = str(caught.value)
    assert f"command {kinds.index(U.WaitEvent)} of the binary (wait_event, run as " in text
    assert f"command {kinds.index(U.EnqueueProgram)} of the binary (enqueue_program, " in text
    assert "out of range" in text


def test_a_binary_of_fingerprints_and_no_goldens_says_how_to_check_it():
    """A reduced binary whose failure is a wrong kernel records no golden: a plain run says
    NO GOLDENS, and names --locate, which compares its kernels with their fingerprints."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=True)
        a = dev.create_buffer((4,), "float", name="a")
        y = dev.create_buffer((4,), "float", name="y")
        q.enqueue_write_buffer(a, np.arange(4, dtype=np.float32))
        q.enqueue_program(dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])]), {"a": a, "y": y})
        q.finish()
        binary = mnrt.end_capture()
    summary = mnrt.replay(binary).summary()
    assert summary.startswith("NO GOLDENS")
    assert "note: the binary records 1 kernel output fingerprint(s); --locate" in summary
    located = mnrt.replay(binary, locate=True).summary()
    assert "note: the binary records" not in located and "locate: all 1 kernel" in located
