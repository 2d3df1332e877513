"""The fast command reader gives exactly what the generated object API decodes: the same
classes, values, types and defaults, for every table, union member and attribute kind,
fields present or absent, vtables shared or not."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_verify import full_binary, pack
from vtables import build, build_overlapping, empty_command_vtable

import mnrt
from mnrt.format import unpack
from mnrt.format.fb.Attribute import AttributeT
from mnrt.format.fb.BufferDesc import BufferDescT
from mnrt.format.fb.Command import CommandT
from mnrt.format.fb.CommandUnion import CommandUnion
from mnrt.format.fb.CreateBuffer import CreateBufferT
from mnrt.format.fb.CreateProgram import CreateProgramT
from mnrt.format.fb.EnqueueProgram import EnqueueProgramT
from mnrt.format.fb.GoldenCheck import GoldenCheckT
from mnrt.format.fb.KernelDesc import KernelDescT
from mnrt.format.fb.LightBinary import LightBinary, LightBinaryT
from mnrt.format.fb.ProgramDesc import ProgramDescT
from mnrt.format.fb.ReadBuffer import ReadBufferT
from mnrt.format.fb.SlotView import SlotViewT
from mnrt.format.fb.Version import VersionT
from mnrt.format.fb.WriteBuffer import WriteBufferT
from mnrt.format.unpack import read_commands

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def generated(buf: bytes, offset: int = 4) -> list[CommandT]:
    """What the object API decodes (one object per entry)."""
    root = LightBinary.GetRootAs(buf, offset)
    return [CommandT.InitFromObj(root.Commands(i)) for i in range(root.CommandsLength())]


def fast(buf: bytes, offset: int = 4) -> list[CommandT]:
    return read_commands(memoryview(buf), LightBinary.GetRootAs(buf, offset)._tab.Pos)


def assert_same(a, b, where: str = "command") -> None:
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert a == b or (math.isnan(a) and math.isnan(b)), f"{where}: {a} != {b}"
    elif hasattr(a, "__dict__"):
        assert a.__dict__.keys() == b.__dict__.keys(), where
        for name in a.__dict__:
            assert_same(a.__dict__[name], b.__dict__[name], f"{where}.{name}")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_every_table_member_and_attribute_kind_reads_as_the_object_api_reads_it():
    buf = pack(full_binary())
    assert_same(fast(buf), generated(buf))


def test_fields_written_even_when_default_read_the_same():
    builder = flatbuffers.Builder(1024)
    builder.ForceDefaults(True)
    builder.FinishSizePrefixed(full_binary().Pack(builder), file_identifier=b"MNLB")
    buf = bytes(builder.Output())
    assert_same(fast(buf), generated(buf))


@pytest.mark.parametrize("sample", ["mlp.mnlb", "traced_loop.mnlb"])
def test_binaries_the_capture_writer_packed_from_templates_read_the_same(sample):
    buf = (SAMPLES / sample).read_bytes()
    mine = fast(buf)
    assert_same(mine, generated(buf))
    binary = mnrt.LightBinary.load(SAMPLES / sample)
    assert_same(binary.commands, generated(buf))
    # Entries that share a table share its object, as before.
    root = LightBinary.GetRootAs(buf, 4)
    positions = [root.Commands(i)._tab.Pos for i in range(root.CommandsLength())]
    for i in range(len(mine)):
        for j in range(i):
            assert (mine[i] is mine[j]) == (positions[i] == positions[j])


def test_commands_without_a_body_or_with_no_commands_read_the_same():
    for commands in ([], None, [CommandT(cmdType=0, cmd=None), CommandT(cmdType=5, cmd=None)]):
        buf = pack(LightBinaryT(version=VersionT(major=1, minor=0), commands=commands))
        assert_same(fast(buf), generated(buf))


optional_text = st.none() | st.text(max_size=8)
ids = st.integers(0, 2**32 - 1)
doubles = st.floats(allow_nan=True, allow_infinity=True)


def _attribute(draw) -> AttributeT:
    return AttributeT(
        name=draw(st.text(max_size=6)),
        kind=draw(st.integers(0, 6)),
        i=draw(st.integers(-(2**63), 2**63 - 1)),
        f=draw(doubles),
        s=draw(optional_text),
        ints=draw(st.none() | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)),
        floats=draw(st.none() | st.lists(doubles, max_size=4)),
    )


@st.composite
def command(draw) -> CommandT:
    kind = draw(st.sampled_from(["write", "read", "enqueue", "create", "program", "golden"]))
    if kind == "write":
        body = WriteBufferT(queueId=draw(ids), bufferId=draw(ids), data=draw(ids),
                            blocking=draw(st.booleans()))  # fmt: skip
    elif kind == "read":
        body = ReadBufferT(queueId=draw(ids), bufferId=draw(ids), blocking=draw(st.booleans()),
                           golden=draw(ids), rtol=draw(doubles), atol=draw(doubles))  # fmt: skip
    elif kind == "enqueue":
        body = EnqueueProgramT(queueId=draw(ids), programId=draw(ids),
                               bufferIds=draw(st.none() | st.lists(ids, max_size=5)),
                               blocking=draw(st.booleans()))  # fmt: skip
    elif kind == "create":
        shape = draw(st.none() | st.lists(st.integers(0, 2**64 - 1), max_size=4))
        desc = BufferDescT(shape=shape, dtype=draw(st.integers(0, 7)), name=draw(optional_text))
        body = CreateBufferT(bufferId=draw(ids), deviceId=draw(ids), desc=desc)
    elif kind == "program":
        kernels = [
            KernelDescT(
                op=draw(st.text(min_size=1, max_size=6)),
                inputs=draw(st.none() | st.lists(st.text(max_size=4), max_size=3)),
                outputs=draw(st.none() | st.lists(st.text(max_size=4), max_size=3)),
                attrs=None
                if draw(st.booleans())
                else [_attribute(draw) for _ in range(draw(st.integers(0, 3)))],
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        views = [
            SlotViewT(
                slot=draw(st.text(max_size=4)),
                of=draw(st.text(max_size=4)),
                offset=draw(st.integers(0, 2**64 - 1)),
                shape=draw(st.none() | st.lists(st.integers(0, 2**64 - 1), max_size=3)),
            )
            for _ in range(draw(st.integers(0, 2)))
        ]
        program = ProgramDescT(name=draw(optional_text), kernels=kernels, views=views or None)
        body = CreateProgramT(programId=draw(ids), deviceId=draw(ids), program=program)
    else:
        body = GoldenCheckT(queueId=draw(ids), bufferId=draw(ids), golden=draw(ids),
                            rtol=draw(doubles), atol=draw(doubles),
                            name=draw(optional_text))  # fmt: skip
    member = getattr(CommandUnion, type(body).__name__[:-1])
    return CommandT(cmdType=member, cmd=body)


@settings(max_examples=150, deadline=None)
@given(st.lists(command(), max_size=6), st.booleans())
def test_random_commands_read_as_the_object_api_reads_them(commands, force_defaults):
    builder = flatbuffers.Builder(1024)
    builder.ForceDefaults(force_defaults)
    root = LightBinaryT(version=VersionT(major=1, minor=0), commands=commands).Pack(builder)
    builder.FinishSizePrefixed(root, file_identifier=b"MNLB")
    buf = bytes(builder.Output())
    assert_same(fast(buf), generated(buf))


def test_wide_and_overlapping_vtables_read_the_same_and_leave_only_small_layouts():
    # 4000 commands, each with its own wide vtable (64 KiB, overlapping: a newer writer's
    # fields, or a hostile file), and 200 sharing one such vtable.
    for buf in (build_overlapping(4000, list(range(4000))),
                build([empty_command_vtable(65534)], [0] * 200)):  # fmt: skip
        assert_same(mnrt.LightBinary(buf).commands, generated(buf))
    # A layout is keyed by the schema's slots alone, so what decoding reads and keeps per
    # table is bounded by the schema, not by the file's vtables.
    for table in unpack._TABLES.values():
        assert all(len(key) <= 2 * table.slots for key in table._layouts)


def test_a_vector_of_enums_gets_a_reader(monkeypatch):
    # No field of the current schema is one, but the verifier and the object API read them.
    layout = copy.deepcopy(unpack.LAYOUT)
    desc = layout["tables"]["BufferDesc"]
    desc["fields"] = (*desc["fields"], {
        "name": "dtypes", "slot": len(desc["fields"]), "kind": "vector", "element": "enum",
        "type": "DType", "size": 1, "align": 1, "signed": False, "required": False,
        "deprecated": False,
    })  # fmt: skip
    monkeypatch.setattr(unpack, "LAYOUT", layout)
    table = unpack._Table("BufferDesc", {})
    assert "dtypes" in {name for name, _ in table.fields.values()}


THREADS = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from test_unpack import fast
from test_verify import FULL
failures, start = [], threading.Barrier(8)
def work():
    start.wait()
    try:
        fast(FULL)
    except Exception as e:
        failures.append(repr(e))
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
sys.exit(failures[0] if failures else 0)
"""


def test_the_first_decodes_of_a_process_on_several_threads_at_once_succeed():
    # A fresh interpreter each time: in one, the readers once were built on first use.
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", THREADS, str(Path(__file__).parent)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
