"""The MPI transport: `mpiexec -n N mnrt run --mpi FILE` (extra `mnrt[mpi]`: mpi4py and the
`mpich` wheel, whose `mpiexec` lands in the environment's bin).

Messages. A cross-rank copy is one point-to-point message of the array's bytes: the sender
snapshots the array and sends the snapshot through the buffer protocol without waiting for
the receiver (so two ranks that copy to each other at once cannot deadlock); the receiver
fills the destination in place. A cross-rank event is an empty
message. Copies, events and the report's collectives each have their own communicator (a
`Dup` of the world), so their tags never meet.

Tags. A message is tagged by the global id the executor gives (the copy's, the event's),
mapped by tags.py: an id up to MPI_TAG_UB is the tag itself; a larger id travels on a second
communicator, tagged `id % (MPI_TAG_UB + 1)` with the full 64-bit id in an 8-byte header
before the payload; the receiver takes the messages of that tag from that rank in order and
keeps one meant for another id until that id is asked for. Messages of one id from one rank
arrive in the order they were sent (MPI's non-overtaking rule), so a copy replayed in every
loop, or in every replay of a trace, pairs each send with its receive.

Failures. Every wait polls its request with a short sleep (an MPI library's own blocking
wait spins a core, which starves the ranks sharing it) and, with `timeout`, gives up with a
`TransportError` naming what it waited for. A rank that fails calls `abort`, which is
MPI_Abort: the launcher ends every rank at once with that exit code (a rank killed by a
signal is ended the same way by the launcher), so no rank is left waiting on a message that
will never come.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from ...errors import InvalidArgumentError, TransportError
from .base import Transport
from .tags import wire_tag

try:
    from mpi4py import MPI
except (ImportError, RuntimeError, OSError) as e:  # no mpi4py, or no MPI library under it
    raise InvalidArgumentError(
        f"--mpi needs mpi4py and an MPI library ({e}): pip install mnrt[mpi]"
    ) from None

_HEADER = 8  # bytes of the full id before a wide message's payload
_GATHER = 1  # tag of gather's messages on the collectives' communicator
_BROADCAST = 2  # and of broadcast's
_FIRST_PAUSE_S = 1e-5
_MAX_PAUSE_S = 1e-3  # the longest sleep between two polls of a wait
# Before MPI_Abort: mpiexec forwards a rank's output through a pipe, and ending the job at
# once loses the error line this rank just printed (seen about 1 run in 10).
_ABORT_GRACE_S = 0.2


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array's bytes as a flat uint8 view (no copy)."""
    return array.reshape(-1).view(np.uint8)


class _Channel:
    """One kind of message (copies, or events) on its own pair of communicators."""

    def __init__(self, world: Any, kind: str, tag_ub: int) -> None:
        self.comm, self.wide = world.Dup(), world.Dup()
        self.kind, self.tag_ub = kind, tag_ub
        self.kept: dict[tuple[int, int], deque[np.ndarray]] = {}  # (source, id) -> payloads
        self.lock = threading.Lock()

    def isend(self, payload: np.ndarray, dest: int, gid: int) -> tuple[Any, np.ndarray]:
        """Start sending `payload` (flat uint8, owned by the caller until the request ends)."""
        wide, tag = wire_tag(gid, self.tag_ub)
        if not wide:
            return self.comm.Isend(payload, dest, tag), payload
        packed = np.empty(_HEADER + payload.size, np.uint8)
        packed[:_HEADER] = np.array([gid], "<u8").view(np.uint8)
        packed[_HEADER:] = payload
        return self.wide.Isend(packed, dest, tag), packed

    def recv(self, out: np.ndarray, source: int, gid: int, wait: Callable, what: str) -> None:
        """Fill `out` (flat uint8) with the next message of id `gid` from `source`."""
        wide, tag = wire_tag(gid, self.tag_ub)
        if not wide:
            status = MPI.Status()
            request = self.comm.Irecv(out, source, tag)
            wait(lambda: request.Test(status), what)
            self._check_size(status.Get_count(MPI.BYTE), out.size, source, gid)
            return
        got: list[np.ndarray] = []
        wait(lambda: self._poll_wide(source, gid, tag, got), what)
        self._check_size(got[0].size, out.size, source, gid)
        out[:] = got[0]

    def _poll_wide(self, source: int, gid: int, tag: int, got: list[np.ndarray]) -> bool:
        """One step of a wide receive: True once `got` holds the payload for `gid` (kept
        earlier, or just received); a message for another id of the same tag is kept."""
        with self.lock:
            kept = self.kept.get((source, gid))
            if kept:
                got.append(kept.popleft())
                return True
            status = MPI.Status()
            message = self.wide.Improbe(source, tag, status)
            if message is None:
                return False
            packed = np.empty(status.Get_count(MPI.BYTE), np.uint8)
            message.Recv(packed)  # matched: this message, already here
        if packed.size < _HEADER:
            raise TransportError(
                f"rank {source} sent a {self.kind} message of {packed.size} bytes, shorter than "
                "its id header: the ranks run different mnrt versions"
            )
        sent_id = int(packed[:_HEADER].view("<u8")[0])
        if sent_id == gid:
            got.append(packed[_HEADER:])
            return True
        with self.lock:
            self.kept.setdefault((source, sent_id), deque()).append(packed[_HEADER:])
        return False

    def _check_size(self, received: int, expected: int, source: int, gid: int) -> None:
        if received != expected:
            raise TransportError(
                f"rank {source} sent {received} bytes for {self.kind} {gid}, this rank expected "
                f"{expected}: the ranks replay different binaries or placements"
            )

    def free(self) -> None:
        for comm in (self.comm, self.wide):
            comm.Free()


class MpiTransport(Transport):
    """The processes of an MPI job (COMM_WORLD, or `comm`) as the ranks of one replay.
    `timeout` (seconds, None for none) bounds every wait for another rank."""

    def __init__(self, comm: Any = None, timeout: float | None = None) -> None:
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidArgumentError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.world = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()
        self.timeout = timeout
        tag_ub = self.world.Get_attr(MPI.TAG_UB)
        try:
            self.data = _Channel(self.world, "copy", tag_ub)
            self.events = _Channel(self.world, "event", tag_ub)
            self.collective = self.world.Dup()
        except MPI.Exception as e:
            raise TransportError(f"cannot set up MPI communicators: {e}") from None
        self.in_flight: list[tuple[Any, np.ndarray]] = []  # sends not known complete
        self.lock = threading.Lock()
        # A large message moves only while its sender calls into MPI; the replaying thread
        # is mostly waiting on its devices, so a helper thread polls the sends in flight
        # (where the library allows calls from two threads).
        self.threaded = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self.progress: threading.Thread | None = None
        self.closed = False

    # --- waiting --------------------------------------------------------------------
    def _wait(self, done: Callable[[], bool], what: str) -> None:
        """Poll `done` until it says True, sleeping a little longer each time (up to a
        millisecond); past `timeout` seconds, a TransportError naming `what`."""
        start = time.monotonic()
        pause = _FIRST_PAUSE_S
        try:
            while not done():
                if self.timeout is not None and time.monotonic() - start > self.timeout:
                    raise TransportError(
                        f"waited {self.timeout:g} s for {what} and gave up: "
                        "that rank is stuck or the ranks replay different binaries (raise "
                        "--mpi-timeout for longer work)"
                    )
                time.sleep(pause)
                pause = min(2 * pause, _MAX_PAUSE_S)
        except MPI.Exception as e:
            raise TransportError(f"MPI failed while waiting for {what}: {e}") from None

    def _check_peer(self, peer: int) -> None:
        if self.closed:
            raise TransportError("the MPI transport is closed")
        if isinstance(peer, bool) or not isinstance(peer, (int, np.integer)):
            raise InvalidArgumentError(f"a rank is an integer, got {peer!r}")
        if not 0 <= peer < self.size or peer == self.rank:
            raise InvalidArgumentError(
                f"rank {self.rank} cannot message rank {peer}: the other ranks of this "
                f"{self.size}-rank job are the peers"
            )

    def _start(self, channel: _Channel, payload: np.ndarray, dest: int, gid: int) -> None:
        try:
            request = channel.isend(payload, dest, gid)
            with self.lock:
                self.in_flight.append(request)
                self._prune()
                if self.in_flight and self.threaded and self.progress is None:
                    self.progress = threading.Thread(
                        target=self._progress, name="mnrt-mpi-progress", daemon=True
                    )
                    self.progress.start()
        except MPI.Exception as e:
            raise TransportError(f"cannot send to rank {dest}: {e}") from None

    def _prune(self) -> None:
        """Forget the sends that have completed (their snapshots are freed)."""
        self.in_flight = [r for r in self.in_flight if not r[0].Test()]

    def _progress(self) -> None:
        """The helper thread: poll the sends in flight until none is left (a failing one
        is left for the replaying thread's next call or `close` to raise)."""
        pause = _FIRST_PAUSE_S
        while True:
            with self.lock:
                try:
                    self._prune()
                except MPI.Exception:
                    self.progress = None
                    return
                if not self.in_flight:
                    self.progress = None
                    return
            time.sleep(pause)
            pause = min(2 * pause, _MAX_PAUSE_S)

    # --- Transport ------------------------------------------------------------------
    def send(self, array: np.ndarray, dest: int, tag: int) -> None:
        self._check_peer(dest)
        snapshot = np.array(array, copy=True, order="C")
        self._start(self.data, _bytes_of(snapshot), dest, tag)

    def recv(self, out: np.ndarray, source: int, tag: int) -> None:
        self._check_peer(source)
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise InvalidArgumentError("recv fills a C-contiguous, writeable array")
        what = f"copy {tag} from rank {source}"
        self.data.recv(_bytes_of(out), source, tag, self._wait, what)

    def signal(self, dest: int, tag: int) -> None:
        self._check_peer(dest)
        self._start(self.events, np.empty(0, np.uint8), dest, tag)

    def wait_signal(self, source: int, tag: int) -> None:
        self._check_peer(source)
        what = f"event {tag} from rank {source}"
        self.events.recv(np.empty(0, np.uint8), source, tag, self._wait, what)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Pickled objects, point to point to `root`, each wait polled like a message."""
        if not 0 <= root < self.size:
            raise InvalidArgumentError(
                f"gather's root must be a rank below {self.size}, got {root}"
            )
        comm = self.collective
        if self.rank != root:
            request = comm.isend(obj, root, _GATHER)
            self._wait(lambda: request.Test(), f"rank {root} to take this rank's results")
            return None
        gathered: list[Any] = [None] * self.size
        gathered[root] = obj
        for rank in range(self.size):
            if rank == root:
                continue
            found: list[Any] = []

            def arrived(rank: int = rank, found: list[Any] = found) -> bool:
                message = comm.improbe(rank, _GATHER)
                if message is not None:
                    found.append(message.recv())
                return bool(found)

            self._wait(arrived, f"the results of rank {rank}")
            gathered[rank] = found[0]
        return gathered

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        """Pickled, point to point from `root`, each wait polled like a message."""
        if not 0 <= root < self.size:
            raise InvalidArgumentError(
                f"broadcast's root must be a rank below {self.size}, got {root}"
            )
        comm = self.collective
        if self.rank == root:
            for rank in range(self.size):
                if rank != root:
                    request = comm.isend(obj, rank, _BROADCAST)
                    self._wait(request.Test, f"rank {rank} to take rank {root}'s word")
            return obj
        found: list[Any] = []

        def arrived() -> bool:
            message = comm.improbe(root, _BROADCAST)
            if message is not None:
                found.append(message.recv())
            return bool(found)

        self._wait(arrived, f"the word of rank {root}")
        return found[0]

    def agree(self, code: int) -> int:
        mine, everyone = np.array([code], np.int64), np.zeros(1, np.int64)
        request = self.collective.Iallreduce(mine, everyone, op=MPI.MAX)
        self._wait(request.Test, "every rank's exit code")
        return int(everyone[0])

    def abort(self, code: int) -> NoReturn:
        """MPI_Abort: the launcher ends every rank; `mpiexec` exits with `code` (or 1)."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        time.sleep(_ABORT_GRACE_S)
        self.world.Abort(code or 1)
        raise SystemExit(code or 1)  # not reached: MPI_Abort does not return

    def close(self) -> None:
        """Wait for this rank's sends to be received, then free the communicators."""
        if self.closed:
            return

        def sent() -> bool:
            with self.lock:
                self._prune()
                return not self.in_flight

        self._wait(sent, "the other ranks to receive this rank's copies and events")
        self.closed = True
        self.data.free()
        self.events.free()
        self.collective.Free()
