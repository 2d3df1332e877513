"""verify_flatbuffer accepts what flatc's object API writes and rejects malformed buffers."""

from __future__ import annotations

import itertools
import json
import mmap
import struct
import time

import flatbuffers
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnrt.errors import InvalidBinaryError
from mnrt.format import verify
from mnrt.format.binary import stamp_integrity
from mnrt.format.fb import (
    Attribute,
    Command,
    KernelDesc,
    LightBinary,
    Metadata,
    OpenDevice,
    WriteBuffer,
)
from mnrt.format.fb.Attribute import AttributeT
from mnrt.format.fb.AttrKind import AttrKind
from mnrt.format.fb.BeginTraceCapture import BeginTraceCaptureT
from mnrt.format.fb.Blob import BlobT
from mnrt.format.fb.BufferDesc import BufferDescT
from mnrt.format.fb.Command import CommandT
from mnrt.format.fb.CommandUnion import CommandUnion
from mnrt.format.fb.Compression import Compression
from mnrt.format.fb.CopyBuffer import CopyBufferT
from mnrt.format.fb.CreateBuffer import CreateBufferT
from mnrt.format.fb.CreateProgram import CreateProgramT
from mnrt.format.fb.DeallocateBuffer import DeallocateBufferT
from mnrt.format.fb.DeviceDescription import DeviceDescriptionT
from mnrt.format.fb.DType import DType
from mnrt.format.fb.EndTraceCapture import EndTraceCaptureT
from mnrt.format.fb.EnqueueProgram import EnqueueProgramT
from mnrt.format.fb.Finish import FinishT
from mnrt.format.fb.GoldenCheck import GoldenCheckT
from mnrt.format.fb.KernelDesc import KernelDescT
from mnrt.format.fb.KernelFingerprint import KernelFingerprintT
from mnrt.format.fb.LightBinary import LightBinaryT
from mnrt.format.fb.Metadata import MetadataT
from mnrt.format.fb.OpenDevice import OpenDeviceT
from mnrt.format.fb.OpenQueue import OpenQueueT
from mnrt.format.fb.ProgramDesc import ProgramDescT
from mnrt.format.fb.ReadBuffer import ReadBufferT
from mnrt.format.fb.RecordEvent import RecordEventT
from mnrt.format.fb.ReleaseTrace import ReleaseTraceT
from mnrt.format.fb.ReplayTrace import ReplayTraceT
from mnrt.format.fb.SlotView import SlotViewT
from mnrt.format.fb.Version import CreateVersion, VersionT
from mnrt.format.fb.WaitEvent import WaitEventT
from mnrt.format.fb.WriteBuffer import WriteBufferT
from mnrt.format.schema_info import LAYOUT
from mnrt.format.verify import verify_flatbuffer

U32 = struct.Struct("<I")


def full_binary() -> LightBinaryT:
    """A LightBinary using every table, every union member and every attribute kind."""
    attrs = [
        AttributeT(name="alpha", kind=AttrKind.Int, i=-3),
        AttributeT(name="beta", kind=AttrKind.Float, f=0.5),
        AttributeT(name="flag", kind=AttrKind.Bool, i=1),
        AttributeT(name="mode", kind=AttrKind.String, s="same"),
        AttributeT(name="axes", kind=AttrKind.Ints, ints=[0, -1, 2]),
        AttributeT(name="scales", kind=AttrKind.Floats, floats=np.array([1.5, 2.0])),
    ]
    program = ProgramDescT(
        name="mlp",
        kernels=[
            KernelDescT(op="gemm", inputs=["a", "b"], outputs=["c"], attrs=attrs),
            KernelDescT(op="relu", inputs=["c"], outputs=["d"]),
        ],
        views=[SlotViewT(slot="d", of="e", offset=2, shape=[3, 4])],
    )
    members = [
        OpenDeviceT(deviceId=1, index=0),
        OpenQueueT(queueId=2, deviceId=1, index=0),
        CreateBufferT(
            bufferId=3,
            deviceId=1,
            desc=BufferDescT(shape=np.array([4, 8], np.uint64), dtype=DType.Half, name="x"),
        ),
        DeallocateBufferT(bufferId=3),
        WriteBufferT(queueId=2, bufferId=3, data=1, blocking=True),
        ReadBufferT(queueId=2, bufferId=3, blocking=True, golden=2, rtol=1e-3),
        CreateProgramT(programId=4, deviceId=1, program=program),
        EnqueueProgramT(queueId=2, programId=4, bufferIds=[3, 5, 6], blocking=False),
        FinishT(queueId=2),
        BeginTraceCaptureT(queueId=2, traceId=7),
        EndTraceCaptureT(queueId=2, traceId=7),
        ReplayTraceT(queueId=2, traceId=7, blocking=True),
        ReleaseTraceT(deviceId=1, traceId=7),
        GoldenCheckT(queueId=2, bufferId=3, golden=2, name="after relu"),
        CopyBufferT(queueId=2, srcId=3, dstId=5, blocking=False, copyId=8),
        RecordEventT(queueId=2, eventId=9),
        WaitEventT(queueId=2, eventId=9),
    ]
    commands = [
        CommandT(cmdType=getattr(CommandUnion, type(m).__name__[:-1]), cmd=m) for m in members
    ]
    return LightBinaryT(
        version=VersionT(major=1, minor=0),
        schemaHash=0x0123456789ABCDEF,
        producer="mnrt test",
        metadata=MetadataT(
            createdUnixS=1.7e9, hostname="host", python="3.11", mnrtVersion="0.1", description="d"
        ),
        device=DeviceDescriptionT(arch="mn-core-2", deviceCount=1, dramBytes=1 << 34),
        commands=commands,
        blobs=[
            BlobT(offset=0, storedSize=64, size=64, compression=Compression.None_, hash=1),
            BlobT(offset=64, storedSize=10, size=128, compression=Compression.Zstd, hash=2),
        ],
        fingerprints=[
            KernelFingerprintT(
                command=6, kernel=0, output=0, hash=3, min=-1.0, max=2.0, mean=0.5, nonfinite=1
            )
        ],
    )


def pack(obj, *, size_prefixed: bool = True, identifier: bytes | None = b"MNLB") -> bytes:
    builder = flatbuffers.Builder(1024)
    root = obj.Pack(builder)
    if size_prefixed:
        builder.FinishSizePrefixed(root, file_identifier=identifier)
    else:
        builder.Finish(root, file_identifier=identifier)
    return bytes(builder.Output())


def table_names(obj, found: set[str]) -> set[str]:
    """Names of the generated object-API classes reachable from obj."""
    if isinstance(obj, list):
        for item in obj:
            table_names(item, found)
    elif type(obj).__name__.endswith("T") and hasattr(obj, "Pack"):
        found.add(type(obj).__name__[:-1])
        for value in vars(obj).values():
            table_names(value, found)
    return found


FULL = pack(full_binary())
SMALL = pack(
    LightBinaryT(
        version=VersionT(major=1, minor=0),
        producer="p",
        commands=[CommandT(cmdType=CommandUnion.Finish, cmd=FinishT(queueId=1))],
        blobs=[BlobT(offset=0, size=1)],
    )
)


def root_table(buf: bytes) -> LightBinary.LightBinary:
    return LightBinary.LightBinary.GetRootAs(buf, 4)


def field_pos(tab, slot: int) -> int:
    """Absolute position of a present field of a generated accessor's table."""
    off = tab._tab.Offset(4 + 2 * slot)
    assert off
    return tab._tab.Pos + off


def patched(buf: bytes, pos: int, data: bytes) -> bytes:
    out = bytearray(buf)
    out[pos : pos + len(data)] = data
    return bytes(out)


def rejects(buf, match: str, **kwargs) -> InvalidBinaryError:
    with pytest.raises(InvalidBinaryError, match=match) as info:
        verify_flatbuffer(buf, **kwargs)
    assert isinstance(info.value.offset, int)
    assert 0 <= info.value.offset <= len(buf)
    return info.value


# --- acceptance ----------------------------------------------------------------------------


def test_full_binary_covers_every_table_struct_and_union_member():
    obj = full_binary()
    assert table_names(obj, set()) == set(LAYOUT["tables"]) | set(LAYOUT["structs"])
    members = LAYOUT["unions"]["CommandUnion"]["members"]
    assert [c.cmdType for c in obj.commands] == list(range(1, len(members) + 1))


def test_accepts_object_api_output_and_returns_its_size():
    assert verify_flatbuffer(FULL) == len(FULL)
    data_section = bytes(64) + b"blob bytes"
    assert verify_flatbuffer(FULL + data_section) == len(FULL)


def test_accepts_every_buffer_kind_without_copying(tmp_path):
    assert verify_flatbuffer(bytearray(FULL)) == len(FULL)
    assert verify_flatbuffer(memoryview(FULL)) == len(FULL)
    assert verify_flatbuffer(memoryview(b"\0" * 8 + FULL)[8:]) == len(FULL)
    path = tmp_path / "f.mnlb"
    path.write_bytes(FULL)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert verify_flatbuffer(m) == len(FULL)
        m.close()  # the verifier released its views: closing must not fail


def test_accepts_unprefixed_buffers_and_other_roots():
    plain = pack(full_binary(), size_prefixed=False)
    assert verify_flatbuffer(plain, size_prefixed=False) == len(plain)
    kernel = pack(full_binary().commands[6].cmd.program.kernels[0], size_prefixed=False)
    assert verify_flatbuffer(kernel, "KernelDesc", size_prefixed=False) == len(kernel)
    with pytest.raises(ValueError):
        verify_flatbuffer(FULL, "NoSuchTable")


def test_object_api_reads_back_what_was_written():
    assert verify_flatbuffer(FULL)
    back = LightBinaryT.InitFromPackedBuf(FULL, 4)
    assert (back.version.major, back.version.minor) == (1, 0)
    assert back.producer == b"mnrt test"
    assert [c.cmdType for c in back.commands] == [c.cmdType for c in full_binary().commands]
    attrs = back.commands[6].cmd.program.kernels[0].attrs
    assert attrs[4].ints.tolist() == [0, -1, 2]
    assert back.commands[2].cmd.desc.shape.tolist() == [4, 8]


def test_any_field_order_is_accepted():
    # The builder lays fields out in the order they are added; 8-byte scalars next to
    # 4-byte offsets must be accepted at either parity.
    adders = {
        "name": lambda b, refs: Attribute.AddName(b, refs["name"]),
        "i": lambda b, refs: Attribute.AddI(b, -5),
        "f": lambda b, refs: Attribute.AddF(b, 2.5),
        "kind": lambda b, refs: Attribute.AddKind(b, AttrKind.Ints),
        "ints": lambda b, refs: Attribute.AddInts(b, refs["ints"]),
        "floats": lambda b, refs: Attribute.AddFloats(b, refs["floats"]),
    }
    for order in itertools.permutations(adders):
        b = flatbuffers.Builder(256)
        refs = {
            "name": b.CreateString("n"),
            "ints": b.CreateNumpyVector(np.array([1, 2], np.int64)),
            "floats": b.CreateNumpyVector(np.array([0.5], np.float64)),
        }
        Attribute.Start(b)
        for name in order:
            adders[name](b, refs)
        b.Finish(Attribute.End(b))
        buf = bytes(b.Output())
        assert verify_flatbuffer(buf, "Attribute", size_prefixed=False) == len(buf), order


def test_shared_tables_and_strings_are_accepted():
    b = flatbuffers.Builder(256)
    name = b.CreateSharedString("same")
    WriteBuffer.Start(b)
    WriteBuffer.AddBufferId(b, 9)
    member = WriteBuffer.End(b)
    cmds = []
    for _ in range(3):
        Command.Start(b)
        Command.AddCmdType(b, CommandUnion.WriteBuffer)
        Command.AddCmd(b, member)
        cmds.append(Command.End(b))
    LightBinary.StartCommandsVector(b, 3)
    for c in reversed(cmds):
        b.PrependUOffsetTRelative(c)
    vec = b.EndVector()
    meta_name = b.CreateSharedString("same")
    assert meta_name == name
    Metadata.Start(b)
    Metadata.AddHostname(b, name)
    Metadata.AddPython(b, name)
    meta = Metadata.End(b)
    LightBinary.Start(b)
    LightBinary.AddVersion(b, CreateVersion(b, 1, 0))
    LightBinary.AddCommands(b, vec)
    LightBinary.AddMetadata(b, meta)
    b.FinishSizePrefixed(LightBinary.End(b), file_identifier=b"MNLB")
    buf = bytes(b.Output())
    assert verify_flatbuffer(buf) == len(buf)


def test_twenty_thousand_commands_verify_without_a_hang():
    b = flatbuffers.Builder(1 << 20)
    count = 20_000
    cmds = []
    for i in range(count):
        WriteBuffer.Start(b)
        WriteBuffer.AddBufferId(b, i)
        WriteBuffer.AddData(b, 1)
        member = WriteBuffer.End(b)
        Command.Start(b)
        Command.AddCmdType(b, CommandUnion.WriteBuffer)
        Command.AddCmd(b, member)
        cmds.append(Command.End(b))
    LightBinary.StartCommandsVector(b, count)
    for c in reversed(cmds):
        b.PrependUOffsetTRelative(c)
    vec = b.EndVector()
    LightBinary.Start(b)
    LightBinary.AddVersion(b, CreateVersion(b, 1, 0))
    LightBinary.AddCommands(b, vec)
    b.FinishSizePrefixed(LightBinary.End(b), file_identifier=b"MNLB")
    buf = bytes(b.Output())
    start = time.perf_counter()
    assert verify_flatbuffer(buf) == len(buf)
    # A hang guard, not a speed check (benchmarks time the verifier): a walk that revisits
    # tables per command would take minutes on this many.
    assert time.perf_counter() - start < 30


# --- rejection -----------------------------------------------------------------------------


def test_every_truncation_is_rejected():
    for n in range(len(SMALL)):
        rejects(SMALL[:n], ".")


def _accepted(buf: bytes, **kwargs) -> bool:
    try:
        verify_flatbuffer(buf, **kwargs)
    except InvalidBinaryError as exc:
        assert 0 <= exc.offset <= len(buf)
        return False
    return True


@pytest.mark.parametrize("size_prefixed", [True, False])
def test_truncation_with_a_consistent_size_is_rejected(size_prefixed):
    # Only the builder's trailing alignment padding may be cut off without harm.
    full = pack(full_binary(), size_prefixed=size_prefixed)
    for n in range(8, len(full)):
        cut = U32.pack(n - 4) + full[4:n] if size_prefixed else full[:n]
        if _accepted(cut, size_prefixed=size_prefixed):
            assert len(full) - n < 8 and not any(full[n:]), n


def test_wrong_identifier_is_rejected():
    err = rejects(patched(FULL, 8, b"MNLX"), "identifier")
    assert err.offset == 8
    rejects(pack(full_binary(), identifier=None), "identifier")


def test_a_file_of_another_kind_is_named_with_what_makes_a_binary_of_it():
    """JSON (a binary's `mnrt convert` form) and ONNX models (what `mnrt compile` takes) are
    the files users hand a runner by mistake; other bytes get no guess."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "xy")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    models = [helper.make_model(graph), helper.make_model(graph, producer_name="pytorch")]
    for model in models:
        err = rejects(model.SerializeToString(), "identifier")
        assert "looks like an ONNX model" in str(err) and "mnrt compile" in str(err), err
    err = rejects(b'  {"version": [1, 4], "commands": []}' + bytes(16), "identifier")
    assert "looks like JSON" in str(err) and "ONNX" not in str(err)
    for other in (bytes(64), b"\x08" * 64, patched(FULL, 8, b"MNLX")):
        err = rejects(other, "identifier")
        assert "looks like" not in str(err), err


def test_size_prefix_past_the_end_is_rejected():
    err = rejects(patched(FULL, 0, U32.pack(len(FULL))), "size prefix")
    assert err.offset == 0
    rejects(patched(FULL, 0, U32.pack(4)), "size prefix")


def test_union_tag_out_of_range_is_rejected():
    cmd = root_table(FULL).Commands(4)
    tag = field_pos(cmd, 0)
    beyond = len(LAYOUT["unions"]["CommandUnion"]["members"]) + 1
    err = rejects(
        patched(FULL, tag, bytes([beyond])),
        rf"LightBinary\.commands\[4\]\.cmd: type tag {beyond}",
    )
    assert err.offset == tag


def test_union_tag_and_value_must_agree():
    cmd = root_table(FULL).Commands(4)
    rejects(patched(FULL, field_pos(cmd, 0), bytes([0])), "NONE type tag with a value")
    b = flatbuffers.Builder(64)
    Command.Start(b)
    Command.AddCmdType(b, CommandUnion.Finish)
    b.FinishSizePrefixed(Command.End(b))
    rejects(bytes(b.Output()), "without a value", root="Command")
    b = flatbuffers.Builder(64)
    OpenDevice.Start(b)
    member = OpenDevice.End(b)
    Command.Start(b)
    Command.AddCmd(b, member)
    b.FinishSizePrefixed(Command.End(b))
    rejects(bytes(b.Output()), "value without a type tag", root="Command")


def test_union_member_is_verified_as_its_table():
    cmd = root_table(FULL).Commands(2)  # CreateBuffer, whose `desc` is required
    member = cmd.Cmd()
    vt = member.Pos - struct.unpack_from("<i", FULL, member.Pos)[0]
    buf = patched(FULL, vt + 4 + 2 * 2, b"\0\0")  # vtable entry of `desc`
    rejects(buf, r"LightBinary\.commands\[2\]\.cmd \(CreateBuffer\)\.desc: required")


def test_vtable_outside_the_buffer_is_rejected():
    root = root_table(FULL)
    pos = root._tab.Pos
    rejects(patched(FULL, pos, struct.pack("<i", -len(FULL))), "vtable at")
    rejects(patched(FULL, pos, struct.pack("<i", pos)), "vtable at")


def test_vtable_field_outside_the_table_is_rejected():
    root = root_table(FULL)
    vt = root._tab.Pos - struct.unpack_from("<i", FULL, root._tab.Pos)[0]
    tsize = struct.unpack_from("<H", FULL, vt + 2)[0]
    rejects(patched(FULL, vt + 2, struct.pack("<H", 5)), "outside the table")
    rejects(patched(FULL, vt, struct.pack("<H", 3)), "vtable size")
    rejects(patched(FULL, vt + 6, struct.pack("<H", tsize)), "outside the table")


def test_bad_strings_are_rejected():
    root = root_table(FULL)
    slot = field_pos(root, 2)  # producer
    pos = slot + U32.unpack_from(FULL, slot)[0]
    length = U32.unpack_from(FULL, pos)[0]
    err = rejects(patched(FULL, pos + 4 + length, b"x"), "not NUL-terminated")
    assert err.offset == pos + 4 + length
    rejects(patched(FULL, pos, U32.pack(len(FULL))), "runs past the end")
    rejects(patched(FULL, pos + 4, b"\xff"), "not UTF-8")
    rejects(patched(FULL, slot, U32.pack(len(FULL))), "string at")


def test_vector_length_past_the_end_is_rejected():
    root = root_table(FULL)
    slot = field_pos(root, 5)  # commands
    pos = slot + U32.unpack_from(FULL, slot)[0]
    err = rejects(patched(FULL, pos, U32.pack(len(FULL) // 4)), r"LightBinary\.commands: vector")
    assert err.offset == pos
    rejects(patched(FULL, slot, U32.pack(U32.unpack_from(FULL, slot)[0] + 2)), "misaligned")


def test_missing_required_fields_are_rejected():
    obj = full_binary()
    obj.version = None
    rejects(pack(obj), r"LightBinary\.version: required field is missing")
    obj = full_binary()
    obj.commands[6].cmd.program.kernels[1].op = None
    path = r"commands\[6\]\.cmd \(CreateProgram\)\.program\.kernels\[1\]\.op: required"
    rejects(pack(obj), path)
    obj = full_binary()
    obj.commands[6].cmd.program.kernels[0].attrs[2].name = None
    rejects(pack(obj), r"kernels\[0\]\.attrs\[2\]\.name: required")


def test_undeclared_enum_values_are_rejected():
    obj = full_binary()
    obj.blobs[1].compression = 9
    rejects(pack(obj), r"LightBinary\.blobs\[1\]\.compression: 9 is not a value of enum")
    obj = full_binary()
    obj.commands[2].cmd.desc.dtype = 200
    rejects(pack(obj), r"\(CreateBuffer\)\.desc\.dtype")


def test_misaligned_8_byte_fields_are_rejected():
    # Four bytes inserted after the identifier move every table off its 8-byte alignment.
    size, root = struct.unpack_from("<II", FULL)
    shifted = struct.pack("<II", size + 4, root + 4) + FULL[8:12] + bytes(4) + FULL[12:]
    rejects(shifted, "8-byte fields of the table are misaligned")


def test_one_table_used_as_two_types_is_rejected():
    b = flatbuffers.Builder(128)
    Metadata.Start(b)
    meta = Metadata.End(b)
    LightBinary.Start(b)
    LightBinary.AddVersion(b, CreateVersion(b, 1, 0))
    LightBinary.AddMetadata(b, meta)
    LightBinary.AddDevice(b, meta)
    b.FinishSizePrefixed(LightBinary.End(b), file_identifier=b"MNLB")
    rejects(bytes(b.Output()), "also used as Metadata")


def test_depth_is_bounded(monkeypatch):
    monkeypatch.setattr(verify, "MAX_DEPTH", 3)
    rejects(FULL, "nested deeper than 3")


def test_overlapping_strings_exhaust_the_budget():
    # Word i of a byte vector is a string of the bytes up to the last word, which is a NUL:
    # a few hundred bytes then hold thousands of bytes of distinct, overlapping strings.
    words = 33
    blob = b"".join(U32.pack(4 * (words - i - 2)) for i in range(words - 1)) + bytes(4)
    b = flatbuffers.Builder(1024)
    data = b.CreateByteVector(blob)
    op = b.CreateString("op")
    KernelDesc.StartInputsVector(b, words - 1)
    for i in reversed(range(words - 1)):
        b.PrependUOffsetTRelative(data - 4 - 4 * i)
    inputs = b.EndVector()
    KernelDesc.Start(b)
    KernelDesc.AddOp(b, op)
    KernelDesc.AddInputs(b, inputs)
    b.Finish(KernelDesc.End(b))
    buf = bytes(b.Output())
    rejects(buf, "overlap", root="KernelDesc", size_prefixed=False)


# --- fuzzing -------------------------------------------------------------------------------

_WORDS = [0, 1, 2, 3, 4, 8, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


@st.composite
def corrupted(draw):
    buf = bytearray(draw(st.sampled_from([FULL, SMALL])))
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(buf) - 1))
        if draw(st.booleans()):
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        else:
            pos &= ~3
            word = draw(st.sampled_from([*_WORDS, len(buf), len(buf) - pos]))
            buf[pos : pos + 4] = U32.pack(word & 0xFFFFFFFF)[: len(buf) - pos]
    return bytes(buf)


@settings(
    max_examples=400, deadline=1000, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(corrupted())
def test_corrupted_buffers_are_rejected_or_safe_to_read(buf):
    start = time.perf_counter()
    try:
        size = verify_flatbuffer(buf)
    except InvalidBinaryError as exc:
        assert isinstance(exc.offset, int)
        return
    finally:
        assert time.perf_counter() - start < 1.0
    assert size <= len(buf)
    back = LightBinaryT.InitFromPackedBuf(buf, 4)
    table_names(back, set())


# --- fuzz of whole files: the integrity hash first, then the verifier behind it ----------


def _current_sample() -> bytes:
    """samples/traced_loop.mnlb rewritten in the current format (with its integrity hash)."""
    from pathlib import Path

    from mnrt.format import LightBinary as Binary
    from mnrt.format import jsonio

    path = Path(__file__).resolve().parents[2] / "samples" / "traced_loop.mnlb"
    return Binary(jsonio.from_json(jsonio.to_json(Binary.load(path))).to_bytes()).to_bytes()


CURRENT = _current_sample()


@st.composite
def file_mutants(draw):
    """(mutant, restamped): 1-4 byte changes anywhere in a current binary; restamped
    mutants carry a fresh integrity hash, as a hostile writer's would, so that they reach
    the structural and semantic checks behind it."""
    data = bytearray(CURRENT)
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(data) - 1))
        data[pos] = draw(st.integers(0, 255))
    restamped = draw(st.booleans())
    if restamped:
        try:
            stamp_integrity(data)
        except InvalidBinaryError:
            restamped = False
    return bytes(data), restamped


@settings(max_examples=300, deadline=None)
@given(
    cut=st.integers(0, len(CURRENT)),
    changes=st.lists(st.tuples(st.integers(0, 63), st.integers(0, 255)), max_size=4),
)
def test_stamping_what_is_not_a_light_binary_is_an_invalid_binary_error(cut, changes):
    # A size prefix past the end raised struct.error, a root offset past it IndexError.
    data = bytearray(CURRENT[:cut])
    for pos, value in changes:
        if pos < len(data):
            data[pos] = value
    try:
        stamp_integrity(data)
    except InvalidBinaryError:
        return
    assert len(data) == cut


@settings(max_examples=120, deadline=None, derandomize=True)
@given(file_mutants())
def test_fuzzed_files_are_refused_cleanly_or_read_whole(mutant):
    from mnrt.errors import MnrtError
    from mnrt.format import LightBinary as Binary
    from mnrt.format import jsonio
    from mnrt.replay.plan import validate

    data, restamped = mutant
    fb_size = 4 + struct.unpack_from("<I", CURRENT)[0]
    changed = [i for i in range(min(len(data), len(CURRENT))) if data[i] != CURRENT[i]]
    try:
        binary = Binary(data)
        validate(binary)
        doc = jsonio.to_json(binary)  # what `convert` writes: every blob read and checked
    except MnrtError:
        return
    if not restamped:  # accepted without a new stamp: only padding may have changed
        assert all(fb_size <= i for i in changed)
        assert len(data) == len(CURRENT)
    back = jsonio.from_json(json.loads(json.dumps(doc)))  # and `convert` back
    assert jsonio.to_json(back)["commands"] == doc["commands"]
