"""Distributed replay's ownership rules, with two ranks in one process: a transport test
double that passes messages between threads stands in for MPI."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest
from test_multidevice import pipeline_binary, two_device_session

import mnrt
from mnrt.replay import executor as executor_module
from mnrt.replay import placement as placement_module
from mnrt.replay.transport import TRANSPORTS, transport_class
from mnrt.replay.transport.base import Transport
from mnrt.replay.transport.local import LocalTransport

TIMEOUT_S = 20  # a hang guard, not a timing


class ThreadTransport(Transport):
    """Rank `rank` of `size` ranks that are threads of this process."""

    def __init__(self, rank: int, size: int, wires: dict, barrier: threading.Barrier) -> None:
        self.rank, self.size = rank, size
        self.wires, self.barrier = wires, barrier
        self.sent: list[tuple[str, int, int]] = []

    def _wire(self, src: int, dst: int, tag: object) -> queue.Queue:
        return self.wires.setdefault((src, dst, tag), queue.Queue())

    def send(self, array, dest, tag):
        self.sent.append(("send", dest, tag))
        self._wire(self.rank, dest, tag).put(array.copy())

    def recv(self, out, source, tag):
        out[...] = self._wire(source, self.rank, tag).get(timeout=TIMEOUT_S)

    def signal(self, dest, tag):
        self.sent.append(("signal", dest, tag))
        self._wire(self.rank, dest, ("signal", tag)).put(None)

    def wait_signal(self, source, tag):
        self._wire(source, self.rank, ("signal", tag)).get(timeout=TIMEOUT_S)

    def gather(self, obj, root=0):
        self._wire(self.rank, root, "gather").put(obj)
        if self.rank != root:
            return None
        return [self._wire(r, root, "gather").get(timeout=TIMEOUT_S) for r in range(self.size)]

    def broadcast(self, obj, root=0):
        if self.rank == root:
            for r in range(self.size):
                if r != root:
                    self._wire(root, r, "broadcast").put(obj)
            return obj
        return self._wire(root, self.rank, "broadcast").get(timeout=TIMEOUT_S)

    def agree(self, code):
        raise NotImplementedError  # not used by replay itself

    def abort(self, code):
        raise NotImplementedError

    def close(self):
        pass


def on_two_ranks(binary, before=None, **options) -> tuple[list, list]:
    """Replay `binary` on two thread ranks (`before(rank)` first on each rank's thread);
    returns (reports, transports)."""
    wires: dict = {}
    barrier = threading.Barrier(2)
    transports = [ThreadTransport(r, 2, wires, barrier) for r in range(2)]
    reports: list = [None, None]

    def rank_main(r):
        if before is not None:
            before(r)
        reports[r] = mnrt.replay(binary, transport=transports[r], **options)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S * 2)
    assert not any(t.is_alive() for t in threads)
    return reports, transports


def _two_ranks(binary, monkeypatch, **options):
    """Replay `binary` on two thread ranks; returns (reports, transports, opened by rank)."""
    opened: dict[int, list[int]] = {0: [], 1: []}
    rank_of = threading.local()
    real_open = executor_module.open_device_with_fill

    def spy(index, fill, reserved=frozenset()):
        opened[rank_of.rank].append(index)
        return real_open(index, fill, reserved)

    monkeypatch.setattr(executor_module, "open_device_with_fill", spy)

    def remember(r):
        rank_of.rank = r

    reports, transports = on_two_ranks(binary, remember, **options)
    return reports, transports, opened


def test_each_rank_opens_its_devices_and_rank_0_gathers_everything(monkeypatch):
    mnrt.begin_capture()
    two_device_session()
    binary = mnrt.end_capture()
    alone = mnrt.replay(binary)
    (root, other), transports, opened = _two_ranks(binary, monkeypatch, device_map={0: 0, 1: 1})
    assert opened == {0: [0], 1: [1]}
    # The copy leaves rank 0 tagged with its id, the event crosses as a signal.
    copy_id = next(c.cmd.copyId for c in binary.commands if hasattr(c.cmd, "copyId"))
    event_id = next(c.cmd.eventId for c in binary.commands if hasattr(c.cmd, "eventId"))
    assert transports[0].sent == [("send", 1, copy_id), ("signal", 1, event_id)]
    assert transports[1].sent == []
    assert root.passed and root.verified and [c.name for c in root.checks] == ["y"]
    np.testing.assert_array_equal(root.outputs["y"], alone.outputs["y"])
    assert root.modelled == alone.modelled
    assert other.rank == 1 and other.modelled is None and not other.verified


def test_a_pipeline_over_four_devices_on_two_ranks_matches_in_process(monkeypatch):
    binary = pipeline_binary()
    alone = mnrt.replay(binary)
    reports, transports = on_two_ranks(binary)
    assert reports[0].passed
    for name, value in alone.outputs.items():
        np.testing.assert_array_equal(reports[0].outputs[name], value)
    # Block distribution: devices 0, 1 on rank 0 and 2, 3 on rank 1: one copy crosses.
    assert [kind for kind, _, _ in transports[0].sent].count("send") == 1


def test_the_local_transport_is_one_rank_with_no_peers():
    t = transport_class("local")()
    assert isinstance(t, LocalTransport) and (t.rank, t.size) == (0, 1)
    assert t.owner(3, 4) == 0 and t.gather("x") == ["x"] and t.agree(3) == 3
    with pytest.raises(mnrt.InvalidArgumentError, match="rank 0 only"):
        t.send(np.zeros(1), 1, 5)
    with pytest.raises(mnrt.InvalidArgumentError, match="known transports are local, mpi"):
        transport_class("ray")
    assert set(TRANSPORTS) >= {"local", "mpi"}


@pytest.mark.parametrize(
    ("size", "expect"), [(1, [0, 0, 0, 0]), (2, [0, 0, 1, 1]), (4, [0, 1, 2, 3]), (3, [0, 0, 1, 2])]
)
def test_owner_is_a_block_distribution(size, expect):
    t = ThreadTransport(0, size, {}, threading.Barrier(1))
    assert [t.owner(d, 4) for d in range(4)] == expect


def test_a_fold_over_ranks_folds_each_ranks_devices_onto_its_own(monkeypatch):
    """Five logical devices on two ranks (0, 1, 2 and 3, 4) folded onto three runner
    devices: the runner devices are dealt to the ranks by the rule that deals the logical
    ones (0, 1 and 2), each rank folding its own onto its own, as in one process."""
    binary = pipeline_binary(devices=5)
    alone = mnrt.replay(binary, devices=3)
    # Under MPI each rank is a process of its own, which sees no other rank's open devices;
    # these thread ranks share one process, so each is told so (else rank 1, placing after
    # rank 0 opened 0 and 1, deals itself from 2, 3, 4... and picks 4).
    monkeypatch.setattr(placement_module, "open_indices", frozenset)
    reports, _, opened = _two_ranks(binary, monkeypatch, devices=3)
    assert opened == {0: [0, 1], 1: [2]}
    assert reports[0].passed
    for name, value in alone.outputs.items():
        np.testing.assert_array_equal(reports[0].outputs[name], value)


@pytest.mark.parametrize(
    ("fold", "message"),
    [
        ({"devices": 1}, "devices=1, but 2 ranks replay the binary, each on devices of its own"),
        (
            {"device_map": {0: 0, 1: 1, 2: 1, 3: 2}},
            "device_map puts logical devices 1 and 2 on runner device 1, but ranks 0 and 1",
        ),
    ],
)
def test_a_fold_may_not_join_devices_of_two_ranks(fold, message):
    """Each rank replays its devices in a process of its own: a runner device it names is
    its own, so a fold across ranks would be honoured by neither; refused before the
    replay sends or opens anything."""
    transport = ThreadTransport(0, 2, {}, threading.Barrier(1))
    with pytest.raises(mnrt.InvalidArgumentError, match=message):
        mnrt.replay(pipeline_binary(), transport=transport, **fold)
    assert transport.sent == []
