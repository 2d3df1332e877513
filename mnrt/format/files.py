"""Files in and out: writes that are never left half-done (a private temporary file in the
destination's folder, flushed, then renamed over it) and reads that refuse anything but a
regular file (a FIFO would block, /dev/zero would never end).

A writer killed mid-write (kill -9, a power cut) leaves its temporary file or staging folder
behind. Their names say which process made them (`.mnrt-<pid>-<hex>.tmp`, a folder's old
contents `....tmp.old`), so the next writer to the same folder removes those whose process
is gone (once per folder per process), and `mnrt clean FOLDER` lists or removes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import InvalidArgumentError, MnrtError

_LEFTOVER = re.compile(r"\.mnrt-(\d+)-[0-9a-f]+\.tmp(\.old)?")
_swept: set[str] = set()  # folders this process has already swept


def _private_name(folder: Path) -> Path:
    """A name for a temporary file or staging folder of this process in `folder`: short
    (not made from the destination's name, which may be as long as a name can be) and
    carrying the pid, so that a leftover tells whose it was."""
    return folder / f".mnrt-{os.getpid()}-{secrets.token_hex(4)}.tmp"


def _process_gone(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # alive, another user's; or not a pid at all
        return False
    return False


def leftovers(folder: str | os.PathLike) -> list[Path]:
    """Temporary files and staging folders in `folder` that mnrt writers left behind and
    whose process is gone (a live writer's are never listed)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        m = _LEFTOVER.fullmatch(name)
        if m and _process_gone(int(m.group(1))):
            found.append(Path(folder) / name)
    return found


def remove_leftovers(paths: Iterable[Path]) -> list[Path]:
    """Remove what `leftovers` listed; returns what was removed (one another process
    removed meanwhile is skipped)."""
    removed = []
    for path in paths:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise MnrtError(f"cannot remove {path}: {e.strerror or e}") from None
        removed.append(path)
    return removed


def _sweep(folder: Path) -> None:
    """Before the first write of this process to `folder`: remove dead writers' leftovers.
    Best effort: a leftover that cannot be removed is left for `mnrt clean` to report."""
    key = os.path.abspath(folder)
    if key in _swept:
        return
    _swept.add(key)
    try:
        remove_leftovers(leftovers(folder))
    except MnrtError:
        return


def as_path(path: object, what: str) -> Path:
    """`path` (a str, bytes or os.PathLike) as a Path; InvalidArgumentError saying that
    `what` takes a path for anything else (an int would open a file descriptor) and for a
    path no file can have (empty, or holding a NUL)."""
    text = None
    if isinstance(path, (str, bytes, os.PathLike)):
        # TypeError: a PathLike whose __fspath__ gives neither str nor bytes
        with contextlib.suppress(TypeError):
            text = os.fsdecode(os.fspath(path))
    if text is None:
        raise InvalidArgumentError(
            f"{what} takes a path (a str or os.PathLike), not {type(path).__name__}"
        )
    if not text or "\0" in text:
        raise InvalidArgumentError(
            f"{what} {text!r}: " + ("an empty path" if not text else "a path cannot hold a NUL")
        )
    return Path(text)


def check_usable(path: Path, what: str = "") -> None:
    """Refuse a path that no file can have (a name too long, a loop of links, a folder that
    cannot be searched): asking pathlib whether it exists or is a folder raises OSError
    there, rather than answering. One not there yet is usable. `what`: the option that
    named it, with a trailing space ("-o "), if any."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise InvalidArgumentError(f"cannot use {what}{path}: {e.strerror or e}") from None
    except ValueError:  # a NUL
        raise InvalidArgumentError(f"cannot use {what}{path!r}: a path holds a NUL") from None


def write_atomically(path: str | os.PathLike, data: bytes | memoryview) -> None:
    """Replace `path` with `data`, or leave it as it was and raise MnrtError saying why
    (removing the temporary file). The temporary name is unique and opened with O_EXCL, so it
    never follows or reuses what is there; 0o666 leaves permissions to the umask."""
    write_atomically_with(path, lambda f: f.write(data))


def write_atomically_with(path: str | os.PathLike, fill: Callable[[BinaryIO], object]) -> None:
    """write_atomically, with the data written by `fill(file)` as it is made (an archive of
    weights, say) rather than assembled in memory first and copied into the file."""
    path = Path(path)
    if "\0" in str(path):
        raise MnrtError(f"cannot write {str(path)!r}: a path cannot hold a NUL character")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None  # nothing there yet (or nothing we may look at: the write will say)
    if mode is not None and not stat.S_ISREG(mode):
        # Renaming over a FIFO or a device (/dev/null, /dev/stdout) would replace it with a
        # file; a directory cannot take the data either.
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise MnrtError(f"cannot write {path}: it is {kind}; give a file path")
    _sweep(path.parent)
    tmp = _private_name(path.parent)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise MnrtError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise MnrtError(f"cannot write {path}: {e.strerror}") from None
        raise


def open_regular(path: Path, what: str, follow_links: bool = True, pipes: bool = False) -> BinaryIO:
    """Open a regular file for reading, or raise MnrtError saying why not. Opening does not
    block (a FIFO would wait for a writer) and anything but a regular file is refused: a
    device such as /dev/zero would never end. Without `follow_links` a symbolic link is
    refused too (a file named by a document must not lead out of its folder). With `pipes`
    a pipe is opened too, to be read to its end: a shell's `<(command)`, whose writer is
    connected by the time the reader opens it (a named FIFO nothing has opened for writing
    reads as empty instead of blocking until something does); its reader must bound what
    it reads, since a pipe need never end."""
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
    except ValueError:  # a NUL in the path
        raise MnrtError(f"cannot read {path!r}: a path cannot hold a NUL character") from None
    mode = os.fstat(fd).st_mode
    if pipes and stat.S_ISFIFO(mode):
        os.set_blocking(fd, True)  # wait for what a connected writer has still to write
    elif not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise MnrtError(f"{path} is {kind}, not {what}")
    return os.fdopen(fd, "rb")


def parse_json(text: str | bytes) -> Any:
    """json.loads for text from outside: nesting too deep for the parser is a ValueError,
    like any other malformed JSON (json raises RecursionError for it, which a reader's
    `except ValueError` lets through as a traceback)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None


def write_with_folder(path: Path, folder: Path, fill: Callable[[Path], bytes]) -> None:
    """Write `path` and the folder of files it refers to as one step: `fill(staging)` writes
    the files into a private folder and returns the data for `path`. Only then is the folder
    put in place (a folder of that name from an earlier write is replaced), and `path`
    written; if anything fails, both are as they were and the private folder is gone."""
    if path.resolve() == folder.resolve():
        raise MnrtError(f"cannot write {path}: its folder of files would have the same name")
    if folder.exists() and not (folder.is_dir() and not folder.is_symlink()):
        raise MnrtError(f"cannot write {folder}: it is not a folder; move it away")
    _sweep(folder.parent)
    staging = _private_name(folder.parent)
    try:
        staging.mkdir(0o700)
    except OSError as e:
        raise MnrtError(f"cannot write {folder}: {e.strerror or e}") from None
    old = staging.with_name(staging.name + ".old")
    try:
        data = fill(staging)
        if folder.exists():
            os.rename(folder, old)
        os.rename(staging, folder)
        try:
            write_atomically(path, data)
        except BaseException:
            os.rename(folder, staging)
            if old.exists():
                os.rename(old, folder)
            raise
    except OSError as e:
        raise MnrtError(f"cannot write {folder}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
