"""Helpers to make light binaries, valid and hostile, for replay and verifier tests."""

from __future__ import annotations

import json

import flatbuffers
import numpy as np
import pytest

import mnrt
from mnrt.format import jsonio
from mnrt.format import schema_info as si
from mnrt.format.binary import IDENTIFIER
from mnrt.format.fb import LightBinary as lb
from mnrt.format.fb.Version import CreateVersion
from mnrt.format.pack import pack_commands


@pytest.fixture
def small_binary():
    """A short valid capture: one program, one write, one read with a golden."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        a = dev.create_buffer((2, 3), "float", name="a")
        y = dev.create_buffer((2, 3), "float", name="y")
        prog = dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])], name="e")
        q.enqueue_write_buffer(a, np.arange(6, dtype=np.float32).reshape(2, 3) / 10)
        q.enqueue_program(prog, {"a": a, "y": y})
        q.enqueue_read_buffer(y)
        return mnrt.end_capture()


def edited(binary: mnrt.LightBinary, edit) -> mnrt.LightBinary:
    """The binary after `edit(doc)` changed its JSON form (commands, blobs...)."""
    doc = json.loads(jsonio.dumps(binary))
    edit(doc)
    return jsonio.from_json(doc)


def raw_binary(binary: mnrt.LightBinary, version=None, schema_hash=None) -> bytes:
    """The bytes of `binary` re-stamped with another version or schema hash."""
    b = flatbuffers.Builder(1024)
    commands = pack_commands(b, binary.commands)
    lb.LightBinaryStart(b)
    major, minor = version or si.FORMAT_VERSION
    lb.LightBinaryAddVersion(b, CreateVersion(b, major, minor))
    lb.LightBinaryAddSchemaHash(b, si.SCHEMA_HASH if schema_hash is None else schema_hash)
    lb.LightBinaryAddCommands(b, commands)
    b.FinishSizePrefixed(lb.LightBinaryEnd(b), file_identifier=IDENTIFIER)
    return bytes(b.Output())
