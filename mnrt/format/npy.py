""".npy files a user hands mnrt (`mnrt run --input`, `mnrt compile --input`) and the
arrays inside codegen archives: read without trusting them.

Never unpickled (a .npy can carry code), never an .npz archive (np.load would give a
dict-like of arrays), only a regular file (a FIFO would wait for a writer), and the header
is read first: a caller checks the shape and dtype it promises before any data is read, and
a header that promises more data than the file holds is refused, since numpy would allocate
that much before finding out.
"""

from __future__ import annotations

import math
import os
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import InvalidArgumentError, MnrtError
from .files import open_regular


def read_npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """An .npy stream's (shape, Fortran order, dtype), leaving it at the data: what the data
    must be, known before any of it is read (or allocated). A header numpy cannot parse is a
    ValueError, as numpy's own checks raise: its parser also raises tokenize's TokenError,
    MemoryError for nesting too deep, or TypeError for a set or dict key that cannot be
    hashed (`{{}}`), on a header of a few bytes."""
    version = np.lib.format.read_magic(f)
    try:
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        return np.lib.format.read_array_header_2_0(f)
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError, TypeError) as e:
        raise ValueError(f"its header cannot be parsed ({type(e).__name__}: {e})") from None


def load_npy(
    path: str | os.PathLike, check: Callable[[tuple[int, ...], np.dtype], None] | None = None
) -> np.ndarray:
    """The one array of a .npy file. `check(shape, dtype)` sees the header before any data
    is read, and raises (an MnrtError) to refuse it. Every problem with the file itself is
    an InvalidArgumentError naming it."""
    path = Path(path)
    try:
        f = open_regular(path, "a .npy file")
    except MnrtError as e:
        raise InvalidArgumentError(str(e)) from None
    with f:
        if f.read(2) == b"PK":
            raise InvalidArgumentError(
                f"{path} is an .npz archive; save the one array with np.save"
            )
        try:
            f.seek(0)
            shape, _, dtype = read_npy_header(f)
            if dtype.hasobject:
                raise ValueError(
                    "it holds pickled Python objects, which mnrt never loads "
                    "(allow_pickle=False); save a numeric array"
                )
            if check is not None:
                check(tuple(shape), dtype)
            need = math.prod(shape) * dtype.itemsize
            left = os.fstat(f.fileno()).st_size - f.tell()
            if need > left:
                raise ValueError(
                    f"its header says shape {tuple(shape)} of {dtype} ({need} bytes), but only "
                    f"{left} bytes follow (truncated, or not a .npy file)"
                )
            f.seek(0)
            return np.load(f, allow_pickle=False)
        except MnrtError:  # `check` refused it, and said why
            raise
        except (OSError, ValueError, EOFError) as e:
            raise InvalidArgumentError(f"cannot load {path}: {e}") from None
