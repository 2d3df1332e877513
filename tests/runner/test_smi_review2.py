"""Review of fill pattern widths: the width a typed hex pattern asks for, bad patterns as
one-line usage errors, and hand-edited widths in the state file reported as corruption."""

from __future__ import annotations

import json

import pytest
from cli_harness import one_line_error, run

import mnrt


def fill_of(index: int) -> str:
    return json.loads(run("smi", "list", "--json").output)[index]["fill"]


@pytest.mark.parametrize(
    "typed, fill",
    [
        ("0X000000FF", "pattern 0x000000ff"),
        ("0x0000_00ff", "pattern 0x000000ff"),  # underscores are not digits
        ("0x_ff", "pattern 0xff"),
        (" 0x00ff ", "pattern 0x00ff"),
        ("+0x000000ff", "pattern 0x000000ff"),  # a sign does not hide the digits typed
        ("0x" + "0" * 15 + "1", "pattern 0x0000000000000001"),
    ],
)
def test_the_digits_typed_set_the_width(typed, fill):
    r = run("smi", "clear", "1", "--pattern", typed)
    assert r.exit_code == 0, r.output
    assert fill_of(1) == fill


@pytest.mark.parametrize(
    "typed",
    [
        "0x" + "0" * 16 + "ff",  # 18 digits fit no width (they gave 0xff, a 1-byte pattern)
        "0x" + "0" * 17 + "1",
        "0x" + "f" * 17,
        "-0x1",
        "-1",
        "1" * 40,
        "0xff_",
        "0x",
    ],
)
def test_a_pattern_that_fits_no_width_is_a_one_line_usage_error(typed):
    r = run("smi", "clear", "1", "--pattern", typed)
    assert r.exit_code == 2, r.output
    one_line_error(r)
    assert fill_of(1) == "zero"


@pytest.mark.parametrize("width", [3, 0, -4, 16, 2**70, 4.0, "4", True, [4]])
def test_a_hand_edited_width_is_a_corrupt_state_file(tmp_path, monkeypatch, width):
    monkeypatch.setenv("MNRT_HOME", str(tmp_path))
    entry = {"kind": "pattern", "value": 0xFFFF, "width": width}
    (tmp_path / "devices.json").write_text(json.dumps({"1": entry}))
    r = run("smi", "list")
    assert r.exit_code == 3
    assert "corrupt" in one_line_error(r) and "mnrt smi reset 1" in r.output
    with pytest.raises(mnrt.DeviceError, match="corrupt.*smi reset 1"):
        mnrt.open_device(1)
    assert run("smi", "reset", "1").exit_code == 0
    assert fill_of(1) == "zero"
