"""Writing files so that nothing is ever half-written: a private temporary file in the
destination's folder, flushed to disk, then renamed over the destination."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from ..errors import MnrtError


def write_atomic(path: str | os.PathLike, data: bytes | memoryview) -> None:
    """Replace `path` with `data`, or leave it as it was and raise MnrtError saying why.
    The temporary name is unique and opened with O_EXCL, so it never follows or reuses
    something already there; its permissions are left to the umask."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise MnrtError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise MnrtError(f"cannot write {path}: {e.strerror}") from None
        raise
