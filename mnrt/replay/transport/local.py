"""The one-process transport: a single rank that owns every device, so nothing is remote."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import numpy as np

from ...errors import InvalidArgumentError
from .base import Transport


class LocalTransport(Transport):
    """Rank 0 of 1. Replay never sends or waits on it (every device is local); a call that
    names another rank is a caller's mistake and says so."""

    rank = 0
    size = 1

    def _no_peer(self, what: str, peer: int) -> NoReturn:
        raise InvalidArgumentError(
            f"{what} rank {peer}: the local transport has rank 0 only; run with --mpi under "
            "mpiexec for several ranks"
        )

    def send(self, array: np.ndarray, dest: int, tag: int) -> None:
        self._no_peer("send to", dest)

    def recv(self, out: np.ndarray, source: int, tag: int) -> None:
        self._no_peer("receive from", source)

    def signal(self, dest: int, tag: int) -> None:
        self._no_peer("signal", dest)

    def wait_signal(self, source: int, tag: int) -> None:
        self._no_peer("wait for a signal from", source)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        return [obj]

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        if root != 0:
            self._no_peer("broadcast from", root)
        return obj

    def agree(self, code: int) -> int:
        return code

    def abort(self, code: int) -> NoReturn:
        sys.exit(code or 1)

    def close(self) -> None:
        """Nothing to release."""
