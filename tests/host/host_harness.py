"""Programs the host tests share."""

from __future__ import annotations

import mnrt


def gather_program(dev):
    """A program whose failure only the device can notice (an index out of range): its
    buffers by slot, and the program."""
    data = dev.create_buffer((5,), "float", name="data")
    idx = dev.create_buffer((2,), "int32", name="idx")
    out = dev.create_buffer((2,), "float", name="out")
    prog = dev.create_program(
        [mnrt.Kernel("gather", ["data", "idx"], ["out"], {"axis": 0})], name="lookup"
    )
    return {"data": data, "idx": idx, "out": out}, prog
