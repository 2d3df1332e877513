"""Transports of distributed replay, found by name: adding one is a module and a line here.

Implementations are imported when first asked for, so `mnrt run` never loads mpi4py unless
`--mpi` names it."""

from __future__ import annotations

import importlib

from ...errors import InvalidArgumentError
from .base import Transport

# name -> "module:class" (relative to this package)
TRANSPORTS = {
    "local": ".local:LocalTransport",
    "mpi": ".mpi:MpiTransport",
}

__all__ = ["TRANSPORTS", "Transport", "transport_class"]


def transport_class(name: str) -> type[Transport]:
    """The Transport class registered as `name`."""
    where = TRANSPORTS.get(name)
    if where is None:
        raise InvalidArgumentError(
            f"unknown transport {name!r}: known transports are {', '.join(sorted(TRANSPORTS))}"
        )
    module, cls = where.split(":")
    try:
        return getattr(importlib.import_module(module, __name__), cls)
    except ImportError as e:
        raise InvalidArgumentError(
            f"transport {name!r} is not available here ({e}); for mpi install mnrt[mpi]"
        ) from None
