"""Hostile binaries and JSON documents found by review: each is refused with one MnrtError
line (exit 2), before anything runs, with no traceback, hang or outsized allocation."""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import threading
from pathlib import Path

import flatbuffers
import pytest
import xxhash
import zstandard
from click.testing import CliRunner
from conftest import edited

import mnrt
from mnrt.format import LightBinary, jsonio
from mnrt.format import schema_info as si
from mnrt.format.blobs import ZSTD, BlobInfo
from mnrt.format.fb import Command, CreateProgram, KernelDesc, ProgramDesc
from mnrt.format.fb import LightBinary as lb
from mnrt.format.fb.CommandUnion import CommandUnion
from mnrt.format.fb.Version import CreateVersion
from mnrt.replay.plan import validate
from mnrt.runner.cli import cli

# Ids in the small_binary fixture: device 1, buffers a=2 and y=3, program 4, queue 5.
DEV, A, Y, PROG, Q = 1, 2, 3, 4, 5


def invoke(*args) -> tuple[int, str]:
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.output


def assert_one_line_error(code: int, out: str, pattern: str) -> None:
    assert code == 2, out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert out.startswith("mnrt: error:") and pattern in out, out


# --- the FlatBuffer: sharing that decodes to far more than the file ----------------------


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
    b.FinishSizePrefixed(lb.End(b), file_identifier=b"MNLB")
    return bytes(b.Output())


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


# --- blobs ----------------------------------------------------------------------------------


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


# --- semantic checks: refused by verify, before replay runs anything -----------------------


def add(*commands: dict):
    def edit(doc: dict) -> None:
        doc["commands"] += [{"cmd": c} for c in commands]

    return edit


def trace(command: str, trace_id: int = 9, **more) -> dict:
    ids = {"device_id": DEV} if command == "ReleaseTrace" else {"queue_id": Q}
    return {"type": command, **ids, "trace_id": trace_id, **more}


CAPTURED = (trace("BeginTraceCapture"), trace("EndTraceCapture"))
ENQUEUE = {"type": "EnqueueProgram", "queue_id": Q, "program_id": PROG, "buffer_ids": [A, Y]}

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
    assert_one_line_error(*invoke("verify", path), "released twice (command 11)")


def test_replay_refuses_bad_tolerance_arguments(small_binary):
    for rtol in (-1.0, float("inf"), float("nan"), "1e-3"):
        with pytest.raises(mnrt.InvalidArgumentError, match="rtol must be"):
            mnrt.replay(small_binary, rtol=rtol)


# --- files that are not regular files, and files that cannot be written ------------------


@pytest.fixture
def fifo(tmp_path):
    """A FIFO; a writer opens it after a while, so that code that blocks on it (the bug)
    comes unstuck instead of hanging the test run."""
    path = tmp_path / "pipe.mnlb"
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        while not done.wait(10):
            with contextlib.suppress(OSError):  # no reader waiting
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    threading.Thread(target=unblock, daemon=True).start()
    yield path
    done.set()


@pytest.mark.parametrize("command", ["run", "info", "verify", "dump", "bench", "convert"])
def test_a_fifo_is_refused_not_waited_on(fifo, tmp_path, command):
    more = {"dump": ["--json"], "convert": [tmp_path / "out.json"]}.get(command, [])
    assert_one_line_error(*invoke(command, fifo, *more), "is not a regular file")


def test_convert_leaves_its_input_and_nothing_else_when_it_fails(small_binary, tmp_path):
    source = tmp_path / "doc.json"
    source.write_text(json.dumps({**_doc(small_binary), "blobs": 5}))
    before = source.read_bytes()
    assert_one_line_error(*invoke("convert", source, source), "$.blobs: expected a list")
    assert source.read_bytes() == before
    binary = tmp_path / "b.mnlb"
    small_binary.save(binary)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        assert_one_line_error(*invoke("convert", binary, locked / "b.json"), "cannot write")
    finally:
        locked.chmod(0o700)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.mnlb", "doc.json", "locked"]


def test_run_report_and_outputs_that_cannot_be_written_are_one_line_errors(small_binary, tmp_path):
    path = tmp_path / "b.mnlb"
    small_binary.save(path)
    code, out = invoke("run", path, "--report", tmp_path / "missing" / "r.json")
    assert_one_line_error(code, out, "cannot write")
    (tmp_path / "file").write_text("")
    code, out = invoke("run", path, "--save-outputs", tmp_path / "file" / "sub")
    assert_one_line_error(code, out, "cannot save outputs")


def test_buffer_names_are_made_safe_file_names(small_binary, tmp_path):
    def rename(doc: dict) -> None:
        doc["commands"][2]["cmd"]["desc"]["name"] = "../y\x00" + "z" * 300

    path = tmp_path / "b.mnlb"
    edited(small_binary, rename).save(path)
    code, out = invoke("run", path, "--save-outputs", tmp_path / "out")
    assert code == 0, out
    [saved] = (tmp_path / "out").iterdir()
    assert saved.name.startswith(".._y_zzz") and saved.suffix == ".npy" and len(saved.name) < 210


# --- the JSON form --------------------------------------------------------------------------


def _doc(small_binary) -> dict:
    return json.loads(jsonio.dumps(small_binary))


def _with(key: str, value):
    def edit(doc: dict) -> dict:
        doc[key] = value
        return doc

    return edit


JSON_CASES = {
    "blobs not a list": (_with("blobs", 5), "$.blobs: expected a list"),
    "struct not an object": (_with("version", 5), "expected an object for Version"),
    "bool as an enum": (
        lambda d: d["commands"][1]["cmd"]["desc"].update(dtype=True) or d,
        "True is not a DType",
    ),
    "lone surrogate": (
        lambda d: d["metadata"].update(hostname="\ud800") or d,
        "is not a valid string",
    ),
    "integer beyond a double": (
        lambda d: d["metadata"].update(created_unix_s=10**400) or d,
        "... (401 characters) is not a valid double",
    ),
    "blob_dir outside the folder": (_with("blob_dir", "/etc"), "must be the plain name"),
    "blob_dir not a string": (_with("blob_dir", ["x"]), "must be the plain name"),
}


@pytest.mark.parametrize("case", list(JSON_CASES))
def test_convert_refuses_malformed_json_documents(small_binary, tmp_path, case):
    edit, pattern = JSON_CASES[case]
    source = tmp_path / "doc.json"
    source.write_text(json.dumps(edit(_doc(small_binary))))
    assert_one_line_error(*invoke("convert", source, tmp_path / "out.mnlb"), pattern)
    assert not (tmp_path / "out.mnlb").exists()


@pytest.mark.parametrize(
    "text, pattern",
    [
        ('{"format": "mnrt-light-binary-json", "producer": 1' + "0" * 5000 + "}", "4300 digits"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"format": "x", "format": "mnrt-light-binary-json"}', "key 'format' twice"),
    ],
    ids=["long integer", "deep nesting", "duplicate key"],
)
def test_convert_refuses_json_that_python_parses_badly(tmp_path, text, pattern):
    source = tmp_path / "doc.json"
    source.write_text(text)
    assert_one_line_error(*invoke("convert", source, tmp_path / "out.mnlb"), pattern)


def test_blob_files_must_be_regular_files_next_to_the_json(small_binary, fifo, tmp_path):
    doc = _doc(small_binary)
    del doc["blobs"][0]["base64"]
    doc["blobs"][0]["file"] = fifo.name
    source = Path(fifo).with_name("doc.json")
    source.write_text(json.dumps(doc))
    assert_one_line_error(*invoke("convert", source, tmp_path / "o.mnlb"), "not a regular file")


def test_blob_files_and_folders_must_not_be_links_out_of_the_folder(small_binary, tmp_path):
    secret = tmp_path / "outside" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(b"not for the binary")
    work = tmp_path / "work"
    work.mkdir()
    doc = _doc(small_binary)
    del doc["blobs"][0]["base64"]
    doc["blobs"][0]["file"] = "blob.bin"
    (work / "blob.bin").symlink_to(secret)
    (work / "doc.json").write_text(json.dumps(doc))
    assert_one_line_error(
        *invoke("convert", work / "doc.json", tmp_path / "o.mnlb"), "symbolic link"
    )

    (work / "blobs").symlink_to(secret.parent, target_is_directory=True)
    (work / "doc.json").write_text(json.dumps({**doc, "blob_dir": "blobs"}))
    assert_one_line_error(
        *invoke("convert", work / "doc.json", tmp_path / "o.mnlb"), "must be the plain name"
    )
    assert not (tmp_path / "o.mnlb").exists()
