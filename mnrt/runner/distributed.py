"""`mpiexec -n N mnrt run --mpi FILE`: one rank of a distributed replay.

Rules (README "Distributed replay"):
- Ranks own logical devices in blocks (`Transport.owner`): with D logical devices and N
  ranks, rank r replays devices r*D//N .. (r+1)*D//N - 1 on its own emulated devices. N must
  not exceed D (a rank without a device would idle): more ranks than logical devices is
  exit 2 on every rank, naming the largest N that works.
- Every rank must be given the same binary: their FlatBuffers (header, commands, blob table
  with each blob's hash) are compared before anything runs, exit 2 when they differ.
- Before the replay, a failure on any rank (a bad file, a bad option) ends every rank
  cleanly with the largest exit code; rank 0 prints it, naming the rank. During the replay
  a failing rank prints its error and ends the job through `Transport.abort` (MPI_Abort:
  `mpiexec` exits with that rank's code), since the others may be waiting for its messages;
  a rank killed by a signal is ended the same way by the launcher.
- After the replay, rank 0 (which gathered every rank's checks, outputs and spans) writes
  the report and outputs and prints the summary, and every rank exits with rank 0's code.
  A --profile trace is per rank (its own devices): rank 0's at the path given, rank r's
  beside it as <stem>.rank<r><suffix>.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeVar

import click
import xxhash

from .. import errors
from ..format import LightBinary
from ..replay.placement import logical_devices
from ..replay.plan import validate
from ..replay.transport import transport_class
from ..replay.transport.base import Transport

T = TypeVar("T")


def open_mpi(timeout: float | None) -> Transport:
    """This process's rank of the MPI job (exit 2 naming `pip install mnrt[mpi]` when
    mpi4py or its MPI library is missing)."""
    return transport_class("mpi")(timeout=timeout)


def binary_identity(file: Path, binary: LightBinary) -> int:
    """xxh3-64 of the binary's FlatBuffer (header, commands and blob table, which holds each
    blob's hash): equal on two ranks exactly when they replay the same binary."""
    with open(file, "rb") as f:
        return xxhash.xxh3_64_intdigest(f.read(binary.flatbuffer_size))


def rank_file(path: Path, rank: int) -> Path:
    """Where rank `rank` writes its own file of `path` (a --profile trace): rank 0 at
    `path`, rank r at `<stem>.rank<r><suffix>` beside it."""
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


class _Start(NamedTuple):
    """What one rank tells rank 0 before the replay."""

    code: int  # its error's exit code, 0 when ready
    kind: str  # its error's type name
    message: str
    identity: int  # of its binary (see binary_identity)
    devices: int  # the binary's logical devices

    @classmethod
    def failed(cls, e: errors.MnrtError) -> _Start:
        return cls(e.exit_code, type(e).__name__, str(e), 0, 0)

    def error(self, rank: int) -> errors.MnrtError:
        """This rank's error, as rank 0 raises it: of its type where mnrt has it."""
        kind = getattr(errors, self.kind, None)
        if not (isinstance(kind, type) and issubclass(kind, errors.MnrtError)):
            kind = errors.MnrtError
        error = kind(f"rank {rank}: {self.message}")
        error.exit_code = self.code
        return error


def agree_to_start(transport: Transport, file: Path, prepare: Callable[[], T]) -> T:
    """`prepare()` on every rank (it returns a tuple, the binary first), then the job's
    checks (the binary verifies, is the same on every rank, has no fewer logical devices
    than there are ranks). An MnrtError anywhere ends every rank with the same code: rank
    0 raises it (for the CLI's one line or --json document), the others exit quietly."""
    own_error: errors.MnrtError | None = None
    prepared: Any = None

    def step() -> _Start:
        nonlocal own_error, prepared
        try:
            prepared = prepare()
            binary = prepared[0]
            devices = len(logical_devices(validate(binary, blobs=False)))  # blobs: replay's
            return _Start(0, "", "", binary_identity(file, binary), devices)
        except errors.MnrtError as e:
            own_error = e
        except OSError as e:  # the file vanished or became unreadable since it was loaded
            own_error = errors.InvalidArgumentError(f"cannot read {file}: {e.strerror}")
        return _Start.failed(own_error)

    mine = replay_or_abort(transport, step)  # anything else (a bug, Ctrl-C) ends the job
    gathered = transport.gather(mine)
    verdict: errors.MnrtError | None = None
    if gathered is not None:
        verdict = _job_error(gathered, transport.size, own_error)
    code = transport.agree(verdict.exit_code if verdict is not None else 0)
    if code:
        transport.close()
        if verdict is not None:
            raise verdict
        sys.exit(code)
    return prepared


def _job_error(
    gathered: list[_Start], size: int, own: errors.MnrtError | None
) -> errors.MnrtError | None:
    """On rank 0: the error the job stops with, if any: of the failed ranks, the first with
    the largest code (so rank 0 exits with the code every rank agrees on)."""
    code = max(start.code for start in gathered)
    if code:
        rank = next(r for r, start in enumerate(gathered) if start.code == code)
        return own if rank == 0 else gathered[rank].error(rank)
    groups: dict[int, list[int]] = {}
    for rank, start in enumerate(gathered):
        groups.setdefault(start.identity, []).append(rank)
    if len(groups) > 1:
        listed = "; ".join(f"ranks {r} one ({identity:016x})" for identity, r in groups.items())
        return errors.InvalidArgumentError(
            f"the ranks were given different binaries ({listed}); give every rank the same file"
        )
    devices = gathered[0].devices
    if size > devices:
        return errors.InvalidArgumentError(
            f"{size} ranks for a binary of {devices} logical device(s): each rank replays at "
            f"least one device, so run it with at most {devices} ranks (mpiexec -n {devices})"
        )
    return None


def replay_or_abort(
    transport: Transport,
    step: Callable[[], T],
    reported: Callable[[errors.MnrtError], bool] | None = None,
) -> T:
    """`step()` (the replay); an error ends every rank, since the others may be waiting for
    this rank's messages: `reported(error)` may write it (True when it printed it as
    --json's document), else it is printed on one line naming this rank; then `abort`."""
    try:
        return step()
    except errors.MnrtError as e:
        printed = False
        try:
            printed = reported is not None and reported(e)
        except Exception as failure:  # the job must end all the same
            click.echo(f"mnrt: error: rank {transport.rank}: no report: {failure}", err=True)
        if printed:
            transport.abort(e.exit_code)
        _abort(transport, e.exit_code, " ".join(str(e).split()))
    except KeyboardInterrupt:
        _abort(transport, errors.EXIT_INTERRUPTED, "interrupted")
    except BaseException:  # a bug: its traceback, and the job still ends
        traceback.print_exc()
        _abort(transport, 1, "internal error (traceback above)")


def _abort(transport: Transport, code: int, message: str) -> NoReturn:
    click.echo(f"mnrt: error: rank {transport.rank}: {message}", err=True)
    transport.abort(code)


def finish(transport: Transport, code: int) -> NoReturn:
    """Every rank exits with rank 0's `code` (other ranks pass 0)."""
    agreed = transport.agree(code)
    transport.close()
    sys.exit(agreed)
