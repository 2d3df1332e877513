"""Hostile and broken binaries: a clear MnrtError naming the problem, never a traceback,
a hang, or an allocation larger than the file justifies; `mnrt run` exits 2."""

from __future__ import annotations

import base64
import importlib
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import edited, raw_binary
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.format import schema_info as si
from mnrt.runner.cli import cli

SAMPLE = "samples/traced_loop.mnlb"


def run_cli(path) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["run", str(path)])
    return r.exit_code, r.output


def load_and_replay(data: bytes):
    return mnrt.replay(mnrt.LightBinary(data))


def test_truncated_file_at_every_length(small_binary):
    data = small_binary.to_bytes()
    for n in list(range(0, 64)) + list(range(64, len(data), 7)):
        with pytest.raises(mnrt.InvalidBinaryError):
            load_and_replay(data[:n])


def test_empty_and_missing_files_give_one_line_errors(tmp_path):
    empty = tmp_path / "empty.mnlb"
    empty.write_bytes(b"")
    code, out = run_cli(empty)
    assert code == 2 and "is empty" in out and "Traceback" not in out
    code, out = run_cli(tmp_path / "missing.mnlb")
    assert code == 2 and "no such file" in out


def test_wrong_identifier(small_binary):
    data = bytearray(small_binary.to_bytes())
    data[8:12] = b"ONNX"
    with pytest.raises(mnrt.InvalidBinaryError, match="identifier"):
        mnrt.LightBinary(bytes(data))


def test_other_major_and_newer_minor_are_rejected(small_binary):
    major, minor = si.FORMAT_VERSION
    for version, pattern in [
        ((major + 1, 0), "not readable"),
        ((major, minor + 1), "not readable"),
    ]:
        with pytest.raises(mnrt.UnsupportedVersionError, match=pattern):
            mnrt.LightBinary(raw_binary(small_binary, version=version))


def test_schema_hash_mismatch(small_binary):
    with pytest.raises(mnrt.UnsupportedVersionError, match="schema hash"):
        mnrt.LightBinary(raw_binary(small_binary, schema_hash=0x1234))


def test_blob_checksum_mismatch(small_binary):
    data = bytearray(small_binary.to_bytes())
    data[-1] ^= 0x40  # the last byte of the data section belongs to the last blob
    with pytest.raises(mnrt.InvalidBinaryError, match="blob .* is corrupt"):
        load_and_replay(bytes(data))


def test_buffer_claiming_a_tebibyte(small_binary):
    def huge(doc):
        doc["commands"][1]["cmd"]["desc"]["shape"] = [1 << 38]

    bad = edited(small_binary, huge)
    with pytest.raises(mnrt.InvalidBinaryError, match="more than the device's") as e:
        mnrt.replay(bad)
    assert e.value.command == 1


def test_empty_buffer_with_unaddressable_dimensions(small_binary):
    # Zero bytes, but numpy cannot even describe the array: refused before anything runs.
    def empty_but_huge(doc):
        doc["commands"][1]["cmd"]["desc"]["shape"] = [0, 1 << 31, 1 << 31]

    with pytest.raises(mnrt.InvalidBinaryError, match="spans more than the device's") as e:
        mnrt.replay(edited(small_binary, empty_but_huge))
    assert e.value.command == 1


def test_id_used_before_creation(small_binary):
    def swap(doc):
        cmds = doc["commands"]
        write = next(i for i, c in enumerate(cmds) if c["cmd"]["type"] == "WriteBuffer")
        cmds.insert(1, cmds.pop(write))

    with pytest.raises(mnrt.InvalidBinaryError, match="used before it is defined") as e:
        mnrt.replay(edited(small_binary, swap))
    assert e.value.command == 1


def test_id_reused_and_wrong_kind(small_binary):
    def reuse(doc):
        doc["commands"][2]["cmd"]["buffer_id"] = doc["commands"][1]["cmd"]["buffer_id"]

    with pytest.raises(mnrt.InvalidBinaryError, match="defined twice"):
        mnrt.replay(edited(small_binary, reuse))

    def wrong_kind(doc):
        w = next(c for c in doc["commands"] if c["cmd"]["type"] == "WriteBuffer")
        w["cmd"]["buffer_id"] = 1  # the device's id

    with pytest.raises(mnrt.InvalidBinaryError, match="is a device, not a buffer"):
        mnrt.replay(edited(small_binary, wrong_kind))


def test_blob_size_must_match_the_buffer(small_binary):
    def shrink(doc):
        blob = doc["blobs"][0]
        blob["base64"] = base64.b64encode(b"\0" * 8).decode()
        blob["size"] = 8
        del blob["hash"]

    with pytest.raises(mnrt.InvalidBinaryError, match="holds 8 bytes; the buffer has 24"):
        mnrt.replay(edited(small_binary, shrink))


def test_unknown_kernel_in_a_program(small_binary):
    def rename(doc):
        prog = next(c for c in doc["commands"] if c["cmd"]["type"] == "CreateProgram")
        prog["cmd"]["program"]["kernels"][0]["op"] = "exp2"

    with pytest.raises(mnrt.InvalidBinaryError, match="unknown kernel 'exp2'"):
        mnrt.replay(edited(small_binary, rename))


def test_union_tag_out_of_range(small_binary):
    data = bytearray(small_binary.to_bytes())
    # Find a Command table's union tag (a ubyte 1..14) by patching each candidate byte and
    # keeping a change the verifier must refuse: any tag above 14 is out of range.
    refused = 0
    for pos in range(12, small_binary.flatbuffer_size):
        if data[pos] == 1:  # OpenDevice's tag is 1
            trial = bytearray(data)
            trial[pos] = 200
            try:
                mnrt.LightBinary(bytes(trial))
            except mnrt.InvalidBinaryError as e:
                refused += "CommandUnion" in str(e) or "union" in str(e)
    assert refused >= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_sample_binaries_fail_cleanly(data):
    original = Path(SAMPLE).read_bytes()
    mutated = bytearray(original)
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(mutated) - 1))
        mutated[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        mutated = mutated[: data.draw(st.integers(0, len(mutated)))]
    start = time.perf_counter()
    try:
        report = load_and_replay(bytes(mutated))
    except mnrt.MnrtError:
        pass
    else:
        assert isinstance(report.passed, bool)
    assert time.perf_counter() - start < 10


def test_cli_exits_2_on_invalid_binaries(tmp_path, small_binary):
    data = bytearray(small_binary.to_bytes())
    data[8:12] = b"XXXX"
    bad = tmp_path / "bad.mnlb"
    bad.write_bytes(bytes(data))
    for command in (["run"], ["info"], ["verify"], ["dump", "--json"], ["bench"]):
        r = CliRunner().invoke(cli, [*command, str(bad)])
        assert r.exit_code == 2, command
        assert r.output.startswith("mnrt: error:") and len(r.output.strip().splitlines()) == 1


def test_golden_mismatch_is_not_an_error(small_binary, tmp_path):
    def change_one(doc):
        read = next(c for c in doc["commands"] if c["cmd"]["type"] == "ReadBuffer")
        blob = doc["blobs"][read["cmd"]["golden"] - 1]
        values = np.frombuffer(base64.b64decode(blob["base64"]), np.float32).copy()
        values[4] += 1.0
        blob["base64"] = base64.b64encode(values.tobytes()).decode()
        del blob["hash"]

    path = tmp_path / "mismatch.mnlb"
    edited(small_binary, change_one).save(path)
    report = mnrt.replay(path)
    assert not report.passed
    check = report.checks[0]
    assert check.first_mismatch == (1, 1) and check.mismatches == 1
    code, out = run_cli(path)
    assert code == 1 and "FAIL" in out and "(1, 1)" in out


def test_buffers_larger_than_the_host_memory_are_refused_before_running(
    small_binary, monkeypatch, tmp_path
):
    replay_module = importlib.import_module("mnrt.replay")  # mnrt.replay is the function
    monkeypatch.setattr(replay_module, "host_memory_bytes", lambda: 32)  # a 32-byte machine
    with pytest.raises(mnrt.OutOfMemoryError, match="more than this machine's 32 bytes"):
        mnrt.replay(small_binary)
    path = tmp_path / "m.mnlb"
    small_binary.save(path)
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 3 and r.output.count("\n") == 1
