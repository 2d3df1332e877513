"""Message tags from global ids. MPI only guarantees tags up to MPI_TAG_UB (at least 32767;
2**29-1 under the mpich wheel) while global ids are 64-bit: an id up to the bound is its own
tag; a larger one is "wide": it travels on a second channel, tagged `id % (tag_ub + 1)`, with
the full id in a header so the receiver can tell apart the ids that share that tag."""

from __future__ import annotations

import numpy as np

from ...errors import InvalidArgumentError

ID_LIMIT = 2**64  # global ids are uint64


def wire_tag(gid: int, tag_ub: int) -> tuple[bool, int]:
    """(wide, tag) of the message for global id `gid` when tags go up to `tag_ub`."""
    if isinstance(gid, bool) or not isinstance(gid, (int, np.integer)) or not 0 <= gid < ID_LIMIT:
        raise InvalidArgumentError(f"a message tag is a global id from 0 to 2**64-1, got {gid!r}")
    gid = int(gid)
    if gid <= tag_ub:
        return False, gid
    return True, gid % (tag_ub + 1)
