"""The MPI transport on its own: messages, folded tags, collectives and failures, each run
as a real job under `mpiexec` (tests/replay/mpi_worker.py is one rank)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mpi_harness import run_mpi

from mnrt.errors import InvalidArgumentError
from mnrt.replay.transport.tags import ID_LIMIT, wire_tag

WORKER = Path(__file__).with_name("mpi_worker.py")


def worker(ranks: int, scenario: str, **env: str):
    return run_mpi(ranks, sys.executable, WORKER, scenario, env=env)


@given(st.integers(0, ID_LIMIT - 1), st.sampled_from([32767, 2**29 - 1, 2**31 - 1]))
def test_every_id_gets_a_tag_mpi_allows(gid, tag_ub):
    wide, tag = wire_tag(gid, tag_ub)
    assert 0 <= tag <= tag_ub
    assert wide == (gid > tag_ub)
    if not wide:
        assert tag == gid  # small ids are their own tags: nothing to tell apart


@pytest.mark.parametrize("bad", [-1, ID_LIMIT, True, 1.0, "3"])
def test_a_tag_that_is_no_global_id_is_refused(bad):
    with pytest.raises(InvalidArgumentError, match="global id"):
        wire_tag(bad, 32767)


@pytest.mark.parametrize("ranks", [2, 4])
def test_ranks_exchange_copies_events_gather_and_broadcast(ranks, tmp_path):
    r = worker(ranks, "exchange", MPI_WORKER_OUT=str(tmp_path))
    # Every rank exits with the code they agreed on: the largest rank number they offered.
    assert r.returncode == ranks - 1, r.stderr
    docs = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(ranks)]
    assert [d["rank"] for d in docs] == list(range(ranks))
    assert all(d["agreed"] == ranks - 1 for d in docs)
    assert all(d["word"] == {"from": ranks - 1} for d in docs)
    assert all(d["gathered"] is None for d in docs[1:])
    gathered = docs[0]["gathered"]
    assert [g["rank"] for g in gathered] == list(range(ranks))
    for receiver in gathered:
        for sender, (first, second, wide_a, wide_b) in receiver["seen"].items():
            base = [[100 * int(sender) + 4 * i + j for j in range(4)] for i in range(3)]
            assert first == base  # what the array held when it was sent
            assert second == [[v + 1000 for v in row] for row in base]
            assert wide_a == [int(sender)] * 5 and wide_b == [int(sender) + 0.5] * 3


def test_a_rank_that_raises_ends_every_rank():
    r = worker(2, "raise")  # rank 0 waits for an event rank 1 never sends
    assert r.returncode == 2, r.stderr  # the failing rank's exit code, through MPI_Abort
    assert "rank 1: MnrtError: rank 1 fails on purpose" in r.stderr


def test_a_killed_rank_ends_every_rank():
    r = worker(2, "kill")
    assert r.returncode != 0
    assert "signal 9" in r.stdout + r.stderr


def test_a_message_of_the_wrong_size_is_named():
    r = worker(2, "wrong-size")
    assert r.returncode == 3, r.stderr
    assert "rank 0 sent 8 bytes for copy 3, this rank expected 12" in r.stderr


def test_a_wait_past_the_timeout_gives_up():
    r = worker(2, "timeout", MPI_WORKER_TIMEOUT="0.5")
    assert r.returncode == 3, r.stderr
    assert "waited 0.5 s for event 11" in r.stderr
