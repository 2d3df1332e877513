"""The transport interface of distributed replay: how ranks that each replay some of a
binary's devices move copies and event signals between them, and agree on the outcome.

Replay code talks to a Transport only; an implementation is one module (local.py for one
process, mpi.py for MPI) and one line in the registry (__init__.py). Message tags are capture
global ids (a copy's `copy_id`, an event's `event_id`), so a mismatch between ranks shows up
as a named message, not a hang. Every method is called from the replaying thread only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NoReturn

import numpy as np


class Transport(ABC):
    """One rank's view of the ranks replaying a binary together."""

    rank: int
    size: int

    def owner(self, logical_device: int, n_devices: int) -> int:
        """The rank that replays logical device `logical_device` (its position, 0..n-1,
        among the binary's devices in captured-index order): a block distribution, so
        neighbouring pipeline stages share a rank when there are fewer ranks than devices."""
        return logical_device * self.size // n_devices

    @abstractmethod
    def send(self, array: np.ndarray, dest: int, tag: int) -> None:
        """Send a contiguous array to rank `dest`; `tag` is the copy's global id."""

    @abstractmethod
    def recv(self, out: np.ndarray, source: int, tag: int) -> None:
        """Receive the array rank `source` sent with `tag` into `out`, in place."""

    @abstractmethod
    def signal(self, dest: int, tag: int) -> None:
        """Tell rank `dest` that the event with global id `tag` has completed."""

    @abstractmethod
    def wait_signal(self, source: int, tag: int) -> None:
        """Block until rank `source` has signalled the event with global id `tag`."""

    @abstractmethod
    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Every rank's `obj`, by rank, on `root`; None on the other ranks."""

    @abstractmethod
    def broadcast(self, obj: Any, root: int = 0) -> Any:
        """`root`'s `obj`, on every rank (the others' `obj` is not used)."""

    @abstractmethod
    def agree(self, code: int) -> int:
        """The largest of every rank's exit `code`, on every rank."""

    @abstractmethod
    def abort(self, code: int) -> NoReturn:
        """End every rank now with a non-zero exit code (a rank failed)."""

    @abstractmethod
    def close(self) -> None:
        """Release the transport (idempotent)."""
