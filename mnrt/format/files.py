"""Files in and out: writes that are never left half-done (a private temporary file in the
destination's folder, flushed, then renamed over it) and reads that refuse anything but a
regular file (a FIFO would block, /dev/zero would never end)."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO

from ..errors import MnrtError


def write_atomically(path: str | os.PathLike, data: bytes | memoryview) -> None:
    """Replace `path` with `data`, or leave it as it was and raise MnrtError saying why
    (removing the temporary file). The temporary name is unique and opened with O_EXCL, so it
    never follows or reuses what is there; 0o666 leaves permissions to the umask."""
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


def open_regular(path: Path, what: str, follow_links: bool = True) -> BinaryIO:
    """Open a regular file for reading, or raise MnrtError saying why not. Opening does not
    block (a FIFO would wait for a writer) and anything but a regular file is refused: a
    device such as /dev/zero would never end. Without `follow_links` a symbolic link is
    refused too (a file named by a document must not lead out of its folder)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        if not follow_links and Path(path).is_symlink():
            raise MnrtError(f"{path} is a symbolic link, not {what}")
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise MnrtError(f"no such file: {path}") from None
    except PermissionError:
        raise MnrtError(f"cannot read {path}: permission denied") from None
    except OSError as e:  # ELOOP: a link that appeared after the check above
        raise MnrtError(f"cannot read {path}: {e.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise MnrtError(f"{path} is {kind}, not {what}")
    return os.fdopen(fd, "rb")
