"""`mnrt smi`: list, clear, reset; errors are one line with the documented exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from cli_harness import one_line_error, run

import mnrt


def test_list_prints_index_name_and_switch_then_the_link():
    r = run("smi", "list")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[:3] == ["0: mnc2emu0  switch 0", "1: mnc2emu1  switch 0", "2: mnc2emu2  switch 1"]
    assert len(lines) == 9
    assert lines[-1].startswith("link: PCIe Gen5 x16, 57.6 GB/s per direction (64 GB/s raw)")
    assert "2 boards per host switch" in lines[-1]


def test_list_json():
    r = run("smi", "list", "--json")
    rows = json.loads(r.output)
    assert rows[3]["name"] == "mnc2emu3" and rows[3]["fill"] == "zero"
    assert [row["switch"] for row in rows] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert rows[0]["link"] == mnrt.MNCORE2.link.describe()
    assert (
        rows[0]["link"]["latency_s"]["same_switch"]
        < rows[0]["link"]["latency_s"]["across_switches"]
    )


def test_clear_then_open_sees_the_pattern_and_reset_restores():
    assert run("smi", "clear", "2", "--pattern", "0xdeadbeef").exit_code == 0
    assert json.loads(run("smi", "list", "--json").output)[2]["fill"] == "pattern 0xdeadbeef"
    with mnrt.open_device(2) as dev:
        b = dev.create_buffer((4,), "uint8")
        assert dev.command_queue().enqueue_read_buffer(b).tobytes() == bytes.fromhex("efbeadde")
    assert "2: mnc2emu2  switch 1  unwritten DRAM: pattern 0xdeadbeef" in run("smi", "list").output
    assert run("smi", "clear", "2", "--seed", "42").exit_code == 0
    assert "seed 42" in run("smi", "list", "--json").output
    assert run("smi", "list").output.splitlines()[:3] == [
        "0: mnc2emu0  switch 0", "1: mnc2emu1  switch 0",
        "2: mnc2emu2  switch 1  unwritten DRAM: seed 42",
    ]  # fmt: skip
    r = run("smi", "reset", "2")
    assert r.exit_code == 0 and "2: mnc2emu2 reset" in r.output
    assert json.loads(run("smi", "list", "--json").output)[2]["fill"] == "zero"


def test_a_hex_pattern_repeats_every_as_many_bytes_as_its_digits_say():
    for typed, width in (("0x000000ff", 4), ("0x00ff", 2), ("0xff", 1), ("0xabc", 2)):
        assert run("smi", "clear", "3", "--pattern", typed).exit_code == 0
        fill = json.loads(run("smi", "list", "--json").output)[3]["fill"]
        assert fill == f"pattern {int(typed, 16):#0{2 + 2 * width}x}"
        with mnrt.open_device(3) as dev:
            b = dev.create_buffer((8,), "uint8")
            got = dev.command_queue().enqueue_read_buffer(b).tobytes()
        assert got == int(typed, 16).to_bytes(width, "little") * (8 // width)
    assert run("smi", "clear", "3", "--pattern", "255").exit_code == 0  # decimal: fewest bytes
    assert json.loads(run("smi", "list", "--json").output)[3]["fill"] == "pattern 0xff"
    assert run("smi", "reset", "3").exit_code == 0


def test_a_state_file_from_before_pattern_widths_still_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("MNRT_HOME", str(tmp_path))
    (tmp_path / "devices.json").write_text(json.dumps({"1": {"kind": "pattern", "value": 171}}))
    assert json.loads(run("smi", "list", "--json").output)[1]["fill"] == "pattern 0xab"


def test_usage_errors_exit_2_with_one_line():
    for args in (
        ["smi", "clear", "0"],
        ["smi", "clear", "0", "--zero", "--seed", "1"],
        ["smi", "reset"],
        ["smi", "clear", "0", "--pattern", "xyz"],
        ["smi", "clear", "0", "--pattern", "0x" + "f" * 17],
    ):
        r = run(*args)
        assert r.exit_code == 2, args
    r = run("smi", "clear", "42", "--zero")
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "mnrt: error: no emulated device 42: devices are 0..7 (set MNRT_DEVICE_COUNT for more)"
    ]


def test_python_dash_m_is_the_same_program(tmp_path):
    env_home = {"MNRT_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "mnrt", "smi", "list"],
        capture_output=True,
        text=True,
        env={**os.environ, **env_home},
        check=True,
    )
    assert out.stdout.startswith("0: mnc2emu0  switch 0\n")
    bad = subprocess.run(
        [sys.executable, "-m", "mnrt", "smi", "clear", "9", "--zero"],
        capture_output=True,
        text=True,
        env={**os.environ, **env_home},
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


# Each writer waits for the go file, then sets its own device's fill many times over, half
# through Device.clear and half through `mnrt smi clear`.
_WRITER = """
import os, sys, time
from click.testing import CliRunner
import mnrt
from mnrt.runner.cli import cli
index, rounds, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 30
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.001)
for k in range(1, rounds + 1):
    if index % 2:
        r = CliRunner().invoke(cli, ["smi", "clear", str(index), "--seed", str(k)])
        assert r.exit_code == 0, r.output
    else:
        with mnrt.open_device(index) as dev:
            dev.clear(seed=k)
"""


def test_concurrent_writers_keep_every_update_and_the_file_stays_valid(tmp_path):
    home = tmp_path / "home"
    go = tmp_path / "go"
    writers, rounds = 8, 25
    env = {**os.environ, "MNRT_HOME": str(home), "MNRT_DEVICE_COUNT": str(writers)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(i), str(rounds), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(writers)
    ]
    try:
        time.sleep(0.5)  # let them import, so that their writes overlap
        go.touch()
        state_file = home / "devices.json"
        deadline = time.monotonic() + 60  # a hang guard, not a timing
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "writers hung"
            if state_file.exists():
                assert isinstance(json.loads(state_file.read_text()), dict)
            time.sleep(0.005)
        for p in procs:
            assert p.returncode == 0, p.stdout.read()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
    state = json.loads((home / "devices.json").read_text())
    assert state == {str(i): {"kind": "seed", "value": rounds} for i in range(writers)}
    assert not list(home.glob(".devices.*.tmp"))


def test_reset_all_repairs_a_corrupt_state_file(tmp_path):
    state_file = tmp_path / "mnrt-home" / "devices.json"
    state_file.parent.mkdir()
    state_file.write_text("{bad")
    assert "mnrt smi reset --all" in one_line_error(run("smi", "list"))
    r = run("smi", "reset", "--all")
    assert r.exit_code == 0, r.output
    assert json.loads(run("smi", "list", "--json").output)[0]["fill"] == "zero"
    with mnrt.open_device(0) as dev:
        b = dev.create_buffer((4,), "uint8")
        assert not dev.command_queue().enqueue_read_buffer(b).any()


def test_reset_all_forgets_devices_beyond_the_count(monkeypatch):
    assert run("smi", "clear", "7", "--pattern", "0xab").exit_code == 0
    monkeypatch.setenv("MNRT_DEVICE_COUNT", "4")
    r = run("smi", "reset", "7")
    assert r.exit_code == 2 and "devices are 0..3" in one_line_error(r)
    r = run("smi", "reset", "--all")
    assert r.exit_code == 0 and r.output.splitlines()[-1] == "3: mnc2emu3 reset"
    monkeypatch.setenv("MNRT_DEVICE_COUNT", "8")
    assert json.loads(run("smi", "list", "--json").output)[7]["fill"] == "zero"


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe{}",
        b"[" * 100_000,
        b'{"1": {"kind": "bogus", "value": 1}}',
        b'{"1": {"kind": "pattern", "value": -5}}',
        b'{"1": {"kind": "pattern", "value": 18446744073709551616}}',
        b'{"1": {"kind": "seed", "value": true}}',
    ],
)
def test_a_malformed_state_file_is_a_one_line_device_error(tmp_path, content):
    state_file = tmp_path / "mnrt-home" / "devices.json"
    state_file.parent.mkdir()
    state_file.write_bytes(content)
    r = run("smi", "list", "--json")
    assert r.exit_code == 3
    assert "corrupt" in one_line_error(r)
    with pytest.raises(mnrt.DeviceError, match="corrupt"):
        mnrt.open_device(1)


def test_device_clear_that_cannot_be_saved_changes_nothing(tmp_path, monkeypatch):
    with mnrt.open_device(0) as dev:
        q = dev.command_queue()
        b = dev.create_buffer((4,), "uint8")
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("MNRT_HOME", str(tmp_path / "a-file" / "home"))
        with pytest.raises(mnrt.DeviceError, match="cannot write device state"):
            dev.clear(pattern=0xAA)
        assert not q.enqueue_read_buffer(b).any()
        assert not q.enqueue_read_buffer(dev.create_buffer((4,), "uint8")).any()


@pytest.mark.parametrize("option", ["--pattern", "--seed"])
def test_a_bad_fill_value_names_its_option(option):
    r = run("smi", "clear", "0", option, "xyz")
    assert r.exit_code == 2 and f"Invalid value for {option}: 'xyz'" in r.output


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
