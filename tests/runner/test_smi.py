"""`mnrt smi`: list, clear, reset; errors are one line with the documented exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cli_harness import run

import mnrt


def test_list_prints_index_and_name():
    r = run("smi", "list")
    assert r.exit_code == 0
    assert r.output.splitlines()[:2] == ["0: mnc2emu0", "1: mnc2emu1"]
    assert len(r.output.splitlines()) == 8


def test_list_json():
    r = run("smi", "list", "--json")
    rows = json.loads(r.output)
    assert rows[3]["name"] == "mnc2emu3" and rows[3]["fill"] == "zero"


def test_clear_then_open_sees_the_pattern_and_reset_restores():
    assert run("smi", "clear", "2", "--pattern", "0xdeadbeef").exit_code == 0
    assert json.loads(run("smi", "list", "--json").output)[2]["fill"] == "pattern 0xdeadbeef"
    with mnrt.open_device(2) as dev:
        b = dev.create_buffer((4,), "uint8")
        assert dev.command_queue().enqueue_read_buffer(b).tobytes() == bytes.fromhex("efbeadde")
    assert run("smi", "clear", "2", "--seed", "42").exit_code == 0
    assert "seed 42" in run("smi", "list", "--json").output
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
    assert out.stdout.startswith("0: mnc2emu0\n")
    bad = subprocess.run(
        [sys.executable, "-m", "mnrt", "smi", "clear", "9", "--zero"],
        capture_output=True,
        text=True,
        env={**os.environ, **env_home},
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
