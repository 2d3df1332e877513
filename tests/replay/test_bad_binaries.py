"""Hostile and broken binaries: a clear MnrtError naming the problem, never a traceback,
a hang, or an allocation larger than the file justifies; `mnrt run` exits 2."""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import re
import struct
import time
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
import xxhash
import zstandard
from cli_harness import assert_one_line_error, invoke_cli
from click.testing import CliRunner
from hostile import edited, raw_binary
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.format import LightBinary, jsonio
from mnrt.format import schema_info as si
from mnrt.format.binary import stamp_integrity
from mnrt.format.blobs import ZSTD, BlobInfo
from mnrt.format.fb import Command, CreateProgram, KernelDesc, ProgramDesc
from mnrt.format.fb import LightBinary as lb
from mnrt.format.fb.CommandUnion import CommandUnion
from mnrt.format.fb.ReadBuffer import ReadBuffer
from mnrt.format.fb.Version import CreateVersion
from mnrt.format.pack import pack_commands
from mnrt.replay.plan import validate
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


@pytest.mark.parametrize("what", [None, 5, 1.5, ["a.mnlb"], object()])
def test_what_is_not_a_path_or_bytes_is_an_argument_error(small_binary, tmp_path, what):
    """An int is not taken as a file descriptor, nor anything else for a path; bytes paths
    are paths."""
    with pytest.raises(mnrt.InvalidArgumentError, match="LightBinary.load takes a path"):
        mnrt.LightBinary.load(what)
    with pytest.raises(mnrt.InvalidArgumentError, match="LightBinary.save takes a path"):
        small_binary.save(what)
    with pytest.raises(mnrt.InvalidArgumentError, match="LightBinary takes a light binary's"):
        mnrt.LightBinary(what)
    with pytest.raises(mnrt.InvalidArgumentError, match="LightBinary.load.* reads one"):
        mnrt.LightBinary(str(tmp_path / "a.mnlb"))
    small_binary.save(bytes(tmp_path / "b.mnlb"))
    assert len(mnrt.LightBinary.load(bytes(tmp_path / "b.mnlb"))) == len(small_binary)


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


VIEWED = "samples/dense_block.mnlb"  # a compiled program whose slots are views (format 1.4)


@pytest.mark.parametrize("sample", [SAMPLE, VIEWED])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_sample_binaries_fail_cleanly(sample, data):
    original = Path(sample).read_bytes()
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


FINGERPRINTED = "samples/mlp_fingerprinted.mnlb"


@pytest.mark.parametrize("sample", [FINGERPRINTED, VIEWED])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_hostile_writer_s_edits_never_crash_a_tool_nor_diff_as_equal(
    sample, data, tmp_path_factory
):
    """Bytes changed and the integrity hash stamped again, as a hostile writer would (random
    edits of the FlatBuffer alone mostly stop at the integrity check): every command that
    reads a binary answers with a documented exit code, never a traceback; and a binary
    `mnrt verify` refuses never diffs as equal to the original (a corrupt payload under its
    recorded hash did)."""
    original = Path(sample).read_bytes()
    end = 4 + struct.unpack_from("<I", original)[0]
    mutated = bytearray(original)
    rng = data.draw(st.randoms(use_true_random=False))  # positions uniform, not at the ends
    for _ in range(data.draw(st.integers(1, 4))):
        # in the FlatBuffer, or in the payloads (which the integrity hash does not cover);
        # a flipped bit keeps an offset aligned and in bounds more often than a new byte
        at = rng.randrange(8, end) if rng.random() < 0.5 else rng.randrange(end, len(mutated))
        flip = mutated[at] ^ 1 << rng.randrange(8)
        mutated[at] = rng.randrange(256) if rng.random() < 0.5 else flip
    with contextlib.suppress(Exception):  # a root too broken to stamp: refused all the same
        stamp_integrity(mutated)
    folder = tmp_path_factory.mktemp("hostile")
    path = folder / "m.mnlb"
    path.write_bytes(mutated)
    out = folder / "out.mnlb"
    codes = {}
    for tool in (["info"], ["verify"], ["dump", "--json"], ["bench", "--json", "--loops", "1"],
                 ["run", "--locate", "--locate-dir", folder / "located"],
                 ["trim", "--commands", "20:27", "-o", out], ["optimize", "-o", out],
                 ["reduce", "--time-limit", "20", "-o", out]):  # fmt: skip
        r = CliRunner().invoke(cli, [str(a) for a in (tool[0], *tool[1:], path)])
        assert r.exception is None or isinstance(r.exception, SystemExit), (tool, r.exception)
        assert r.exit_code in (0, 1, 2, 3, 4) and "Traceback" not in r.output, (tool, r.output)
        codes[tool[0]] = r.exit_code
    for pair in ((sample, path), (path, sample)):
        r = CliRunner().invoke(cli, ["diff", *map(str, pair)])
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        assert r.exit_code in (0, 1, 2) and "Traceback" not in r.output, r.output
        assert not (codes["verify"] == 2 and r.exit_code == 0), r.output


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


# Ids in the small_binary fixture: device 1, buffers a=2 and y=3, program 4, queue 5.
DEV, A, Y, PROG, Q = 1, 2, 3, 4, 5


def shared_program(kernels: int, inputs: int, length: int) -> bytes:
    """One CreateProgram whose kernels are `kernels` references to one kernel whose inputs
    are `inputs` references to one `length`-byte string: each reference decodes again."""
    b = flatbuffers.Builder(1024)
    name = b.CreateString("x" * length)
    op = b.CreateString("concat")
    KernelDesc.StartInputsVector(b, inputs)
    for _ in range(inputs):
        b.PrependUOffsetTRelative(name)
    names = b.EndVector()
    KernelDesc.Start(b)
    KernelDesc.AddOp(b, op)
    KernelDesc.AddInputs(b, names)
    kernel = KernelDesc.End(b)
    ProgramDesc.StartKernelsVector(b, kernels)
    for _ in range(kernels):
        b.PrependUOffsetTRelative(kernel)
    kernel_vec = b.EndVector()
    ProgramDesc.Start(b)
    ProgramDesc.AddKernels(b, kernel_vec)
    program = ProgramDesc.End(b)
    CreateProgram.Start(b)
    CreateProgram.AddProgramId(b, 2)
    CreateProgram.AddDeviceId(b, 1)
    CreateProgram.AddProgram(b, program)
    body = CreateProgram.End(b)
    Command.Start(b)
    Command.AddCmdType(b, CommandUnion.CreateProgram)
    Command.AddCmd(b, body)
    command = Command.End(b)
    lb.StartCommandsVector(b, 1)
    b.PrependUOffsetTRelative(command)
    commands = b.EndVector()
    lb.Start(b)
    lb.AddVersion(b, CreateVersion(b, *si.FORMAT_VERSION))
    lb.AddSchemaHash(b, si.SCHEMA_HASH)
    lb.AddCommands(b, commands)
    b.forceDefaults = True
    lb.AddIntegrity(b, 0)
    b.FinishSizePrefixed(lb.End(b), file_identifier=b"MNLB")
    data = bytearray(b.Output())
    stamp_integrity(data)
    return bytes(data)


def test_shared_strings_and_tables_that_decode_to_gigabytes_are_refused():
    # 5 KB that the object API would decode to 400 x 400 copies of a 2000-byte string.
    data = shared_program(400, 400, 2000)
    with pytest.raises(mnrt.InvalidBinaryError, match="would decode to"):
        LightBinary(data).commands  # noqa: B018


def test_a_little_sharing_and_shared_commands_still_load():
    assert len(LightBinary(shared_program(4, 4, 8)).commands) == 1
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        ins = {f"i{k}": dev.create_buffer((1,), "float", name=f"i{k}") for k in range(64)}
        out = dev.create_buffer((64,), "float", name="o")
        prog = dev.create_program([mnrt.Kernel("concat", list(ins), ["o"], {"axis": 0})])
        for _ in range(3000):  # identical commands: the writer stores one, listed 3000 times
            q.enqueue_program(prog, {**ins, "o": out})
        q.finish()
        binary = mnrt.end_capture()
    loaded = LightBinary(binary.to_bytes())
    assert len(loaded.commands) == len(binary) and validate(loaded).programs


class _Store:
    """What LightBinary.build reads of a BlobStore, with payloads as given."""

    def __init__(self, infos: list[BlobInfo], payloads: list[bytes]) -> None:
        self.infos, self.payloads = infos, payloads


def test_zstd_frame_declaring_a_huge_content_size_is_refused(small_binary):
    # A valid frame of 24 bytes whose header is rewritten to declare 2**62 of content:
    # zstandard would allocate the declared size before noticing, whatever max_output_size.
    data = bytes(range(24))
    frame = zstandard.ZstdCompressor().compress(data)
    assert frame[4] == 0x20 and frame[5] == 24  # single segment, 1-byte content size
    hostile = frame[:4] + bytes([0xE0]) + struct.pack("<Q", 1 << 62) + frame[6:]
    info = BlobInfo(0, len(hostile), 24, ZSTD, xxhash.xxh3_64_intdigest(data))
    golden = small_binary.blobs.read(2).tobytes()
    other = BlobInfo(64, len(golden), 24, 0, xxhash.xxh3_64_intdigest(golden))
    built = LightBinary.build(
        small_binary.commands,
        _Store([info, other], [hostile, golden]),
        producer="test",
        metadata=mnrt.format.binary.MetadataT(),
        device=mnrt.format.binary.DeviceDescriptionT(),
    )
    with pytest.raises(mnrt.InvalidBinaryError, match="declares 4611686018427387904 bytes"):
        validate(LightBinary(built.to_bytes()))


def add(*commands: dict):
    def edit(doc: dict) -> None:
        doc["commands"] += [{"cmd": c} for c in commands]

    return edit


def trace(command: str, trace_id: int = 9, **more) -> dict:
    ids = {"device_id": DEV} if command == "ReleaseTrace" else {"queue_id": Q}
    return {"type": command, **ids, "trace_id": trace_id, **more}


CAPTURED = (trace("BeginTraceCapture"), trace("EndTraceCapture"))


ENQUEUE = {"type": "EnqueueProgram", "queue_id": Q, "program_id": PROG, "buffer_ids": [A, Y]}


def viewing(kernel: tuple[str, str], *views: tuple) -> tuple[dict, dict]:
    """A program of one exp kernel (input, output) with `views` (slot, of, offset, shape),
    created as program id 30, and its enqueue on buffers A and Y."""
    program = {
        "name": "v",
        "kernels": [{"op": "exp", "inputs": [kernel[0]], "outputs": [kernel[1]]}],
        "views": [dict(zip(("slot", "of", "offset", "shape"), v)) for v in views],
    }
    create = {"type": "CreateProgram", "program_id": 30, "device_id": DEV, "program": program}
    return create, {**ENQUEUE, "program_id": 30}


SEMANTIC = {
    "trace released twice": (
        add(*CAPTURED, trace("ReleaseTrace"), trace("ReleaseTrace")),
        "released twice",
    ),
    "trace replayed after release": (
        add(*CAPTURED, trace("ReleaseTrace"), trace("ReplayTrace")),
        "is released",
    ),
    "trace replayed while captured": (
        add(trace("BeginTraceCapture"), trace("ReplayTrace")),
        "while it captures",
    ),
    "trace begun twice": (
        add(trace("BeginTraceCapture"), trace("BeginTraceCapture", 10)),
        "already captures",
    ),
    "trace ended twice": (
        add(*CAPTURED, trace("EndTraceCapture")),
        "not capturing trace",
    ),
    "trace never ended": (add(trace("BeginTraceCapture")), "still being captured"),
    "write inside a trace": (
        add(
            trace("BeginTraceCapture"),
            {"type": "WriteBuffer", "queue_id": Q, "buffer_id": A, "data": 1},
        ),
        "write on queue",
    ),
    "buffer freed while a trace uses it": (
        add(
            trace("BeginTraceCapture"),
            ENQUEUE,
            trace("EndTraceCapture"),
            {"type": "DeallocateBuffer", "buffer_id": A},
            trace("ReplayTrace"),
        ),
        "deallocated since",
    ),
    "queue index out of range": (
        add({"type": "OpenQueue", "queue_id": 20, "device_id": DEV, "index": 1 << 31}),
        "a device has 0..7",
    ),
    "buffer of another device": (
        add(
            {"type": "OpenDevice", "device_id": 20, "index": 1},
            {
                "type": "CreateBuffer",
                "buffer_id": 21,
                "device_id": 20,
                "desc": {"shape": [2, 3], "dtype": "Float"},
            },
            {"type": "ReadBuffer", "queue_id": Q, "buffer_id": 21, "blocking": True},
        ),
        "belongs to device id 20",
    ),
    "output of the wrong shape": (
        add(
            {
                "type": "CreateBuffer",
                "buffer_id": 20,
                "device_id": DEV,
                "desc": {"shape": [3, 2], "dtype": "Float"},
            },
            {**ENQUEUE, "buffer_ids": [A, 20]},
        ),
        "is bound to a float[3, 2]",
    ),
    "output of the wrong dtype": (
        add(
            {
                "type": "CreateBuffer",
                "buffer_id": 20,
                "device_id": DEV,
                "desc": {"shape": [2, 3], "dtype": "Int32"},
            },
            {**ENQUEUE, "buffer_ids": [A, 20]},
        ),
        "is bound to a int32[2, 3]",
    ),
    "view past the end of its buffer": (
        add(*viewing(("a", "part"), ("part", "whole", 4, [2, 3]))),
        "slot 'part' is elements 4...10 of slot 'whole'",
    ),
    "views that form a cycle": (
        add(viewing(("p", "q"), ("p", "q", 0, [2, 3]), ("q", "p", 0, [2, 3]))[0]),
        "form a cycle",
    ),
    "view no kernel names": (
        add(viewing(("a", "y"), ("z", "y", 0, [1]))[0]),
        "view 'z' is no kernel's operand",
    ),
    "view of rank 17": (
        add(viewing(("a", "part"), ("part", "whole", 0, [1] * 17))[0]),
        "view 'part' has rank 17",
    ),
    "negative tolerance": (
        add({"type": "ReadBuffer", "queue_id": Q, "buffer_id": Y, "golden": 2, "rtol": -1.0}),
        "rtol -1.0 is not a tolerance",
    ),
    "infinite tolerance": (
        add({"type": "ReadBuffer", "queue_id": Q, "buffer_id": Y, "golden": 2, "atol": "inf"}),
        "atol inf is not a tolerance",
    ),
}


@pytest.mark.parametrize("case", list(SEMANTIC))
def test_semantic_errors_are_refused_before_replay(small_binary, case):
    edit, pattern = SEMANTIC[case]
    bad = edited(small_binary, edit)
    with pytest.raises(mnrt.InvalidBinaryError, match=re.escape(pattern)) as e:
        validate(bad)
    assert e.value.command == len(bad) - 1 or "never ended" in case or "another device" in case


def test_verify_refuses_what_replay_would_fail_on(small_binary, tmp_path):
    path = tmp_path / "released_twice.mnlb"
    edited(small_binary, SEMANTIC["trace released twice"][0]).save(path)
    assert_one_line_error(*invoke_cli("verify", path), "released twice (command 11)")


@pytest.mark.parametrize("command", ["run", "info", "verify", "dump", "bench", "convert"])
def test_a_fifo_is_refused_not_waited_on(fifo, tmp_path, command):
    more = {"dump": ["--json"], "convert": [tmp_path / "out.json"]}.get(command, [])
    assert_one_line_error(*invoke_cli(command, fifo, *more), "is not a regular file")


def test_run_report_and_outputs_that_cannot_be_written_are_one_line_errors(small_binary, tmp_path):
    path = tmp_path / "b.mnlb"
    small_binary.save(path)
    code, out = invoke_cli("run", path, "--report", tmp_path / "missing" / "r.json")
    assert_one_line_error(code, out, "cannot write")
    (tmp_path / "file").write_text("")
    code, out = invoke_cli("run", path, "--save-outputs", tmp_path / "file" / "sub")
    assert_one_line_error(code, out, "cannot save outputs")


def test_buffer_names_are_made_safe_file_names(small_binary, tmp_path):
    def rename(doc: dict) -> None:
        doc["commands"][2]["cmd"]["desc"]["name"] = "../y/" + "z" * 300  # a NUL is refused

    path = tmp_path / "b.mnlb"
    edited(small_binary, rename).save(path)
    code, out = invoke_cli("run", path, "--save-outputs", tmp_path / "out")
    assert code == 0, out
    [saved] = (tmp_path / "out").iterdir()
    assert saved.name.startswith(".._y_zzz") and saved.suffix == ".npy" and len(saved.name) < 210


# --- integrity: the FlatBuffer (header, commands, blob table) is hashed as a whole -------


def _golden_field(binary: LightBinary) -> int:
    """The file offset of the first ReadBuffer's `golden` (a blob id, u32)."""
    root = binary._root
    for k in range(root.CommandsLength()):
        cmd = root.Commands(k)
        if cmd.CmdType() == CommandUnion.ReadBuffer:
            table = cmd.Cmd()
            read = ReadBuffer()
            read.Init(table.Bytes, table.Pos)
            return read._tab.Pos + read._tab.Offset(10)
    raise AssertionError("no ReadBuffer")


def test_a_golden_dropped_by_editing_bytes_is_refused(small_binary, tmp_path):
    data = bytearray(small_binary.to_bytes())
    at = _golden_field(small_binary)
    assert struct.unpack_from("<I", data, at)[0] != 0
    struct.pack_into("<I", data, at, 0)  # before: PASS with 0/0 goldens, exit 0
    with pytest.raises(mnrt.InvalidBinaryError, match="integrity hash mismatch"):
        LightBinary(bytes(data))
    path = tmp_path / "dropped.mnlb"
    path.write_bytes(data)
    code, out = run_cli(path)
    assert code == 2 and "integrity hash mismatch" in out


def test_every_byte_change_in_the_flatbuffer_is_refused(small_binary):
    data = small_binary.to_bytes()
    for i in range(small_binary.flatbuffer_size):
        for flip in (0x01, 0x80):
            mutant = bytearray(data)
            mutant[i] ^= flip
            with pytest.raises(mnrt.MnrtError):
                LightBinary(bytes(mutant))


def test_a_current_binary_without_its_integrity_field_is_refused(small_binary):
    b = flatbuffers.Builder(1024)
    commands = pack_commands(b, small_binary.commands)
    lb.LightBinaryStart(b)
    lb.LightBinaryAddVersion(b, CreateVersion(b, *si.FORMAT_VERSION))
    lb.LightBinaryAddSchemaHash(b, si.SCHEMA_HASH)
    lb.LightBinaryAddCommands(b, commands)
    b.FinishSizePrefixed(lb.LightBinaryEnd(b), file_identifier=b"MNLB")
    with pytest.raises(mnrt.InvalidBinaryError, match="no integrity hash"):
        LightBinary(bytes(b.Output()))


def test_format_1_0_binaries_have_no_integrity_field_and_still_load():
    binaries = [LightBinary.load(p) for p in (Path(__file__).parents[2] / "samples").glob("*.mnlb")]
    old = [b for b in binaries if b.version == (1, 0)]
    assert len(old) >= 2 and all(b._root.Integrity() == 0 for b in old)
    assert all(b._root.Integrity() != 0 for b in binaries if b.version >= (1, 1))


# --- strings from a binary never reach a terminal raw ------------------------------------

FORGED = "a\x1b]0;owned\x07\nFAKE LINE: PASS"


def _renamed(doc: dict, name: str) -> None:
    doc["commands"][1]["cmd"]["desc"]["name"] = name  # buffer 'a'


@pytest.mark.parametrize("char", ["\x1b", "\x07", "\n", "\x00", "\x9b", "\u202e"])
def test_names_with_control_characters_are_refused(small_binary, char):
    with pytest.raises(mnrt.InvalidBinaryError, match="not printable"):
        edited(small_binary, lambda doc: _renamed(doc, f"a{char}b"))


def test_a_binary_whose_bytes_name_a_buffer_with_an_escape_is_refused(small_binary, tmp_path):
    data = bytearray(small_binary.to_bytes())
    at = data.index(b"\x01\x00\x00\x00a\x00")  # the string "a": length, byte, NUL
    data[at + 4] = 0x1B
    stamp_integrity(data)  # as a hostile writer would
    path = tmp_path / "escape.mnlb"
    path.write_bytes(data)
    code, out = run_cli(path)
    assert code == 2 and out.count("\n") == 1 and "not printable" in out
    assert "\x1b" not in out


def test_a_name_forging_output_lines_is_refused_by_convert(small_binary, tmp_path):
    doc = json.loads(jsonio.dumps(small_binary))
    _renamed(doc, FORGED)
    src, out = tmp_path / "forged.json", tmp_path / "forged.mnlb"
    src.write_text(json.dumps(doc))
    code, text = invoke_cli("convert", str(src), str(out))
    assert code == 2 and "not printable" in text and "FAKE LINE" not in text
    assert "\x1b" not in text and not out.exists()


def test_overlong_names_are_refused(small_binary):
    with pytest.raises(mnrt.InvalidBinaryError, match="more than 1024"):
        edited(small_binary, lambda doc: _renamed(doc, "n" * 5000))
