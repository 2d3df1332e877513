"""Transports of a replay: by name, each a factory of a `Transport`. Adding one = one module
and one line here; a transport whose package is an optional extra is imported only when
asked for, so `mnrt run` works without it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import InvalidArgumentError
from .base import Transport
from .local import LocalTransport

__all__ = ["TRANSPORTS", "LocalTransport", "Transport", "open_transport"]


def _mpi(**options: Any) -> Transport:
    from .mpi import MpiTransport

    return MpiTransport(**options)


TRANSPORTS: dict[str, Callable[..., Transport]] = {"local": LocalTransport, "mpi": _mpi}


def open_transport(name: str, **options: Any) -> Transport:
    """The transport called `name`, opened with `options`."""
    factory = TRANSPORTS.get(name)
    if factory is None:
        raise InvalidArgumentError(
            f"unknown transport {name!r}; known transports are {', '.join(sorted(TRANSPORTS))}"
        )
    return factory(**options)
