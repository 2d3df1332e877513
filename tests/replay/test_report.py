"""ReplayReport: verdicts, check names, failure details and errors, for people and machines."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

import mnrt


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
