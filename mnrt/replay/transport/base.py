"""The transport between the processes of a distributed replay: how one rank's copy reaches
another rank's device, how an event crosses ranks, and how rank 0 collects the report.

Replay code talks to this interface only (never to mpi4py), so another transport (Ray, a
socket one) is one module and one registry line (see `mnrt.replay.transport.TRANSPORTS`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NoReturn

import numpy as np


class Transport(ABC):
    """`size` processes (ranks) that together replay one binary; this one is `rank`."""

    rank: int = 0
    size: int = 1

    def owner(self, logical_device: int, n_devices: int) -> int:
        """The rank that replays `logical_device` (0 .. n_devices-1): a block distribution,
        so neighbouring devices (pipeline stages next to each other) share a rank and their
        copies stay local. With size <= n_devices every rank owns at least one device."""
        return logical_device * self.size // n_devices

    @abstractmethod
    def send(self, array: np.ndarray, dest: int, tag: int) -> None:
        """Send `array` to rank `dest`; `tag` is the copy's global id. Returns at once: the
        array may be changed afterwards (the transport keeps what it must)."""

    @abstractmethod
    def recv(self, out: np.ndarray, source: int, tag: int) -> None:
        """Fill `out` in place with what rank `source` sent under `tag`; blocks until then."""

    @abstractmethod
    def signal(self, dest: int, tag: int) -> None:
        """Tell rank `dest` that the event with global id `tag` has completed."""

    @abstractmethod
    def wait_signal(self, source: int, tag: int) -> None:
        """Block until rank `source` signals the event with global id `tag`."""

    @abstractmethod
    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Every rank's `obj` on `root`, in rank order (None on the other ranks)."""

    @abstractmethod
    def agree(self, code: int) -> int:
        """The largest of every rank's `code`, on every rank: one exit code for all."""

    @abstractmethod
    def abort(self, code: int) -> NoReturn:
        """End every rank now, with a non-zero exit status: for a failure that leaves the
        other ranks waiting on messages this one will never send."""

    @abstractmethod
    def close(self) -> None:
        """Finish what is in flight and release the transport's resources."""
