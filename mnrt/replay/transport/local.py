"""The transport of a replay in one process: one rank, so no device is remote."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import numpy as np

from ...errors import InvalidArgumentError
from .base import Transport


class LocalTransport(Transport):
    """Rank 0 of 1: every device is local, so a message to another rank is a caller's bug."""

    rank, size = 0, 1

    def _no_peer(self, peer: int) -> NoReturn:
        raise InvalidArgumentError(f"rank {peer} does not exist: a local replay has rank 0 only")

    def send(self, array: np.ndarray, dest: int, tag: int) -> None:
        self._no_peer(dest)

    def recv(self, out: np.ndarray, source: int, tag: int) -> None:
        self._no_peer(source)

    def signal(self, dest: int, tag: int) -> None:
        self._no_peer(dest)

    def wait_signal(self, source: int, tag: int) -> None:
        self._no_peer(source)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        if root != 0:
            self._no_peer(root)
        return [obj]

    def agree(self, code: int) -> int:
        return code

    def abort(self, code: int) -> NoReturn:
        sys.exit(code or 1)

    def close(self) -> None:
        """Nothing is held."""
