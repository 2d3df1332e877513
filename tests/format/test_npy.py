"""Reading .npy files without trusting them (format/npy.py)."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.format.npy import load_npy, read_npy_header

# Pieces of a header dictionary: a header made of them is near enough to valid for numpy's
# parser to get far, which random bytes rarely do.
_PIECES = [
    *("{", "}", "(", ")", "[", "]", "'", '"', ":", ",", "\\", "\n", "#", "'''", "j"),
    *("descr", "shape", "fortran_order", "<f4", "True", "1", "-1", "9" * 30, "(" * 120),
]


def _npy(header: bytes, version: int) -> bytes:
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header


@pytest.mark.filterwarnings("ignore:invalid escape sequence")  # numpy parses "\\T" as code
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=30).map("".join),
    st.booleans(),
    st.sampled_from([1, 2, 3]),
)
@example("{{}}", False, 1)  # a set holding a dict: literal_eval's TypeError (seed 103)
@example("{[1]: 2}", True, 2)  # a dict keyed by a list, as a shape
def test_a_header_numpy_cannot_parse_is_a_value_error(body, in_a_dict, version):
    # numpy's parser raised tokenize's TokenError (MemoryError for deep nesting, TypeError
    # for an unhashable set member or key), which `mnrt run --input` let through as a
    # traceback.
    if in_a_dict:
        body = "{'descr': '<f4', 'fortran_order': False, 'shape': " + body + "}"
    data = io.BytesIO(_npy(body.encode() + b"\n", version))
    try:
        shape, _, dtype = read_npy_header(data)
    except (ValueError, EOFError):
        return
    assert isinstance(shape, tuple) and isinstance(dtype, np.dtype)


def test_an_unparsable_header_is_an_invalid_argument_naming_the_file(tmp_path):
    path = tmp_path / "bad.npy"
    path.write_bytes(_npy(b"[1\"b'x'\n", 1))
    with pytest.raises(mnrt.InvalidArgumentError, match="bad.npy: its header cannot be parsed"):
        load_npy(path)
