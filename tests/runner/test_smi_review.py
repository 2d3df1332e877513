"""Device state under MNRT_HOME: concurrent writers, corrupt files, counts that change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from cli_harness import one_line_error, run

import mnrt

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
