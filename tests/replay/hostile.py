"""Helpers to make light binaries hostile, for replay and verifier tests (the valid one they
start from, `small_binary`, is a fixture of tests/conftest.py)."""

from __future__ import annotations

import json

import flatbuffers

import mnrt
from mnrt.format import jsonio
from mnrt.format import schema_info as si
from mnrt.format.binary import IDENTIFIER, stamp_integrity
from mnrt.format.fb import LightBinary as lb
from mnrt.format.fb.Version import CreateVersion
from mnrt.format.pack import pack_commands


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
    b.forceDefaults = True
    lb.LightBinaryAddIntegrity(b, 0)
    b.FinishSizePrefixed(lb.LightBinaryEnd(b), file_identifier=IDENTIFIER)
    data = bytearray(b.Output())
    stamp_integrity(data)
    return bytes(data)
