"""The set of emulated boards on this machine, as `gpfn3-smi list` would show them.

How many boards there are comes from MNRT_DEVICE_COUNT (default: the boards of one
MN-Server 2, `DeviceSpec.link.boards`); each is named `mnc2emu<index>` and sits behind the
host PCIe switch `DeviceSpec.link.switch_of` gives. What a board's DRAM holds before
anything writes it (zeros, a pattern, seeded noise) outlives a process, as real DRAM
contents outlive the program that wrote them: it is kept in a small JSON file under
MNRT_HOME (default ~/.cache/mnrt), which `mnrt smi clear` and `smi reset` change and
`open_device` reads. Writers take a lock, so concurrent processes lose no change; a device
already open keeps what it read at open.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: writers are not serialised
    fcntl = None

from ..errors import DeviceError, DeviceNotFoundError, InvalidArgumentError
from .memory import Fill
from .spec import MNCORE2

DEFAULT_DEVICE_COUNT = MNCORE2.link.boards
MAX_DEVICE_COUNT = 64
ENV_DEVICE_COUNT = "MNRT_DEVICE_COUNT"
ENV_HOME = "MNRT_HOME"


@dataclass(frozen=True)
class DeviceInfo:
    """One emulated board, as listed by `mnrt.list_devices()`."""

    index: int
    name: str
    arch: str
    dram_bytes: int
    fill: str  # what unwritten DRAM reads as: "zero", "pattern 0x...", "seed N"
    switch: int = 0  # the host PCIe switch it sits behind (boards on one share its uplink)

    def __str__(self) -> str:
        return f"{self.index}: {self.name}"


def device_count() -> int:
    raw = os.environ.get(ENV_DEVICE_COUNT)
    if raw is None:
        return DEFAULT_DEVICE_COUNT
    try:
        count = int(raw)
    except ValueError:
        count = -1
    if not 1 <= count <= MAX_DEVICE_COUNT:
        raise InvalidArgumentError(
            f"{ENV_DEVICE_COUNT}={raw!r}: set it to a whole number from 1 to {MAX_DEVICE_COUNT}"
        )
    return count


def device_name(index: int) -> str:
    return f"mnc2emu{index}"


def check_index(index: int) -> int:
    count = device_count()
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise DeviceNotFoundError(
            f"no emulated device {index!r}: devices are 0..{count - 1} "
            f"(set {ENV_DEVICE_COUNT} for more)"
        )
    return index


def _state_path() -> Path:
    home = os.environ.get(ENV_HOME) or os.path.join(Path.home(), ".cache", "mnrt")
    return Path(home) / "devices.json"


def _corrupt(path: Path, why: object) -> DeviceError:
    return DeviceError(
        f"device state file {path} is corrupt ({why}); delete it or run 'mnrt smi reset --all'"
    )


def _load_state() -> dict[str, dict]:
    path = _state_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise DeviceError(
            f"cannot read device state {path}: {e.strerror}; set {ENV_HOME} to a readable folder"
        ) from None
    try:
        state = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise _corrupt(path, e) from None
    if not isinstance(state, dict):
        raise _corrupt(path, "not an object")
    return state


@contextlib.contextmanager
def _locked_state(replace: bool = False) -> Iterator[dict[str, dict]]:
    """The state to change in place (empty with `replace`), saved on exit. Writers hold an
    advisory lock on a file beside it for the whole read-modify-write, so two processes that
    change devices at once both keep their change; readers need no lock (the file is
    replaced atomically)."""
    path = _state_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(".devices.lock"), "a")  # noqa: SIM115 (closed below)
    except OSError as e:
        raise _cannot_write(path, e) from None
    with lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        state = {} if replace else _load_state()
        yield state
        _save_state(state)


def _cannot_write(path: Path, e: OSError) -> DeviceError:
    return DeviceError(
        f"cannot write device state {path}: {e.strerror}; set {ENV_HOME} to a writable folder"
    )


def _save_state(state: dict[str, dict]) -> None:
    path = _state_path()
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".devices.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(state, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise _cannot_write(path, e) from None


def _fill_in(state: dict[str, dict], index: int) -> Fill:
    entry = state.get(str(index))
    if not entry:
        return Fill()
    try:
        kind, value = entry["kind"], entry["value"]
        if kind == "zero":
            return Fill()
        if kind not in ("pattern", "seed") or type(value) is not int:
            raise ValueError(kind)
        if kind == "seed":
            return Fill.of(seed=value)  # its range checks too
        width = entry.get("width")  # absent in files from before patterns had one
        if width is not None and type(width) is not int:
            raise ValueError(width)
        return Fill.of(pattern=value, width=width)
    except (KeyError, TypeError, ValueError, InvalidArgumentError):
        raise DeviceError(
            f"device state for device {index} in {_state_path()} is corrupt; "
            f"run 'mnrt smi reset {index}'"
        ) from None


def load_fill(index: int) -> Fill:
    return _fill_in(_load_state(), index)


def save_fill(index: int, fill: Fill) -> None:
    with _locked_state() as state:
        if fill == Fill():
            state.pop(str(index), None)
        else:
            state[str(index)] = {"kind": fill.kind, "value": fill.value}
            if fill.kind == "pattern":
                state[str(index)]["width"] = fill.width


def reset_all() -> None:
    """Every board back to power-on, those beyond MNRT_DEVICE_COUNT and a corrupt file too."""
    with _locked_state(replace=True):
        pass


def list_devices() -> list[DeviceInfo]:
    """Every emulated board with its index, name and what its unwritten DRAM holds."""
    state = _load_state()  # once: a list is one snapshot, even while another process writes
    return [
        DeviceInfo(
            i,
            device_name(i),
            MNCORE2.arch,
            MNCORE2.dram_bytes,
            _fill_in(state, i).describe(),
            MNCORE2.link.switch_of(i),
        )
        for i in range(device_count())
    ]
