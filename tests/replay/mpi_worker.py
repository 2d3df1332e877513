"""One rank of a transport scenario, run by tests/replay/test_mpi_transport.py under
`mpiexec -n N python mpi_worker.py SCENARIO`. Each rank writes what it saw as JSON to
$MPI_WORKER_OUT/rank<N>.json and exits with the code every rank agreed on; a failing
scenario ends through abort."""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np

from mnrt.errors import MnrtError
from mnrt.replay.transport import transport_class


def exchange(t) -> dict:
    """Every rank sends to every other rank at once (no deadlock: sends never wait), with
    direct ids, ids past MPI_TAG_UB that fold onto one tag (received in the other order),
    an id sent twice (FIFO), and signals; then gather, broadcast (from the last rank)
    and agree."""
    ub = t.world.Get_attr(__import__("mpi4py.MPI").MPI.TAG_UB)
    wide_a, wide_b = ub + 1 + 5, 2**64 - 1 - ((2**64 - 1) % (ub + 1)) + 5  # both fold to 5
    seen = {}
    for peer in range(t.size):
        if peer == t.rank:
            continue
        base = np.arange(12, dtype=np.float32).reshape(3, 4) + 100 * t.rank
        t.send(base, peer, 7)
        base += 1000  # the sender may change its array at once: the message is a snapshot
        t.send(base, peer, 7)
        t.send(np.full(5, t.rank, np.int64), peer, wide_a)
        t.send(np.full(3, t.rank + 0.5, np.float64), peer, wide_b)
        t.signal(peer, 9)
        t.signal(peer, ub + 9)
    for peer in range(t.size):
        if peer == t.rank:
            continue
        first, second = np.empty((3, 4), np.float32), np.empty((3, 4), np.float32)
        t.recv(first, peer, 7)
        t.recv(second, peer, 7)
        b, a = np.empty(3, np.float64), np.empty(5, np.int64)
        t.recv(b, peer, wide_b)  # sent after wide_a, asked for first
        t.recv(a, peer, wide_a)
        t.wait_signal(peer, ub + 9)
        t.wait_signal(peer, 9)
        seen[peer] = [first.tolist(), second.tolist(), a.tolist(), b.tolist()]
    everyone = t.gather({"rank": t.rank, "seen": seen})
    word = t.broadcast({"from": t.rank}, root=t.size - 1)
    return {
        "rank": t.rank,
        "size": t.size,
        "gathered": everyone,
        "word": word,
        "agreed": t.agree(t.rank),
    }


def main() -> None:
    scenario = sys.argv[1]
    timeout = float(os.environ.get("MPI_WORKER_TIMEOUT", "0")) or None
    t = transport_class("mpi")(timeout=timeout)
    try:
        if scenario == "exchange":
            doc = exchange(t)
        elif scenario == "raise" and t.rank == 1:
            raise MnrtError("rank 1 fails on purpose")
        elif scenario == "kill" and t.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        elif scenario == "wrong-size":
            if t.rank == 0:
                t.send(np.zeros(2, np.float32), 1, 3)
            else:
                t.recv(np.zeros(3, np.float32), 0, 3)
            doc = {}
        else:  # rank 0 of raise/kill, every rank of timeout: wait for what never comes
            t.wait_signal(1 - t.rank if t.size == 2 else 1, 11)
            doc = {}
    except MnrtError as e:
        print(f"rank {t.rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        t.abort(e.exit_code)
    t.close()
    out = os.environ.get("MPI_WORKER_OUT")
    if out:  # one file per rank: mpiexec may interleave the ranks' stdout
        with open(os.path.join(out, f"rank{t.rank}.json"), "w") as f:
            json.dump(doc, f)
    sys.exit(doc.get("agreed", 0))


if __name__ == "__main__":
    main()
