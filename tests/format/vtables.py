"""Hand-laid light-binary FlatBuffers whose Command tables have vtables mnrt's writer never
produces (wide ones, as a newer schema's writer would make, and many overlapping ones),
but that verify_flatbuffer accepts."""

from __future__ import annotations

import struct

from mnrt.format.schema_info import KNOWN_SCHEMAS


def build(vtables: list[bytes], table_vt: list[int]) -> bytes:
    """vtables: raw vtable bytes laid out back to back (each must be even-sized);
    table_vt: for each command, the index of the vtable its 4-byte Command table uses
    (every command gets its own 4-byte table with no fields)."""
    buf = bytearray(b"\0" * 12)  # size prefix, root offset, identifier
    buf[8:12] = b"MNLB"
    # root vtable + root table
    root_vt = len(buf)
    buf += struct.pack("<8H", 16, 20, 4, 8, 0, 0, 0, 16)
    while len(buf) % 8:
        buf += b"\0"
    root = len(buf)
    buf += struct.pack("<iHHQI", root - root_vt, 1, 0, KNOWN_SCHEMAS[(1, 0)], 0)  # cmds at +16
    # vtables
    vt_pos = []
    for vt in vtables:
        assert len(vt) % 2 == 0
        while len(buf) % 4:
            buf += b"\0"
        vt_pos.append(len(buf))
        buf += vt
    while len(buf) % 4:
        buf += b"\0"
    # commands vector
    vec = len(buf)
    n = len(table_vt)
    buf += struct.pack("<I", n) + b"\0" * (4 * n)
    tables = len(buf)
    for i, k in enumerate(table_vt):
        pos = tables + 4 * i
        buf += struct.pack("<i", pos - vt_pos[k])
        at = vec + 4 + 4 * i
        struct.pack_into("<I", buf, at, pos - at)
    struct.pack_into("<I", buf, root + 16, vec - (root + 16))
    struct.pack_into("<I", buf, 4, root - 4)
    buf += b"\0" * 4  # padding so nothing ends exactly at the end
    struct.pack_into("<I", buf, 0, len(buf) - 4)
    return bytes(buf)


def empty_command_vtable(vsize: int, filler: int = 0) -> bytes:
    """A Command vtable of vsize bytes: table size 4, cmd_type and cmd absent, the slots the
    schema does not know hold `filler` (offsets of a newer schema's fields)."""
    slots = (vsize - 4) // 2
    return (
        struct.pack("<HH", vsize, 4)
        + struct.pack("<HH", 0, 0)
        + struct.pack(f"<{slots - 2}H", *([filler] * (slots - 2)))
    )


def overlapping_command_vtables(count: int, top: int = 65534, stride: int = 8) -> bytes:
    """`count` distinct Command vtables overlapping in one region of `top` bytes: the k-th
    starts at k*stride and has size top - k*stride, so all end together. Each reads as
    (size, table size 4, cmd_type absent, cmd absent, then slots the schema does not know).
    Returns the region; vtable k is at offset k*stride in it."""
    region = bytearray(top)
    for k in range(count):
        struct.pack_into("<HHHH", region, k * stride, top - k * stride, 4, 0, 0)
    return bytes(region)


def build_overlapping(count: int, order: list[int], top: int = 65534, stride: int = 8) -> bytes:
    """Like build, with the vtables of overlapping_command_vtables: command i uses vtable
    order[i]."""
    buf = bytearray(build([overlapping_command_vtables(count, top, stride)], [0] * len(order)))
    # re-point each table's soffset at its own vtable inside the region
    # find region start: the first table's soffset points at it
    root = 4 + struct.unpack_from("<I", buf, 4)[0]
    vec = root + 16 + struct.unpack_from("<I", buf, root + 16)[0]
    first = vec + 4 + struct.unpack_from("<I", buf, vec + 4)[0]
    region = first - struct.unpack_from("<i", buf, first)[0]
    for i, k in enumerate(order):
        pos = vec + 4 + 4 * i + struct.unpack_from("<I", buf, vec + 4 + 4 * i)[0]
        struct.pack_into("<i", buf, pos, pos - (region + k * stride))
    return bytes(buf)
