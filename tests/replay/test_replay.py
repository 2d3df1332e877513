"""`mnrt.replay()`: what it takes (a binary, a path, bytes; switches, tolerances, a device
mapping), where it runs (placements of the captured devices, several threads at once) and
that it starts from zero-filled devices whatever their saved state."""

from __future__ import annotations

import collections
import threading
from pathlib import Path

import numpy as np
import pytest

import mnrt
from mnrt.format import LightBinary

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
HANG_S = 60  # a hang guard, not a timing


def two_device_binary(indices=(0, 1)) -> mnrt.LightBinary:
    devs = [mnrt.open_device(i) for i in indices]
    mnrt.begin_capture()
    for d in devs:
        q = d.command_queue(0)
        b = d.create_buffer((4,), "float", name=f"b{d.index}")
        q.enqueue_write_buffer(b, np.arange(4, dtype=np.float32) + d.index)
        q.enqueue_read_buffer(b)
    binary = mnrt.end_capture()
    for d in devs:
        d.close()
    return binary


def test_replay_refuses_bad_tolerance_arguments(small_binary):
    for rtol in (-1.0, float("inf"), float("nan"), "1e-3"):
        with pytest.raises(mnrt.InvalidArgumentError, match="rtol must be"):
            mnrt.replay(small_binary, rtol=rtol)


def test_the_report_shows_the_checks_of_the_loop_that_failed():
    report = mnrt.ReplayReport(binary=LightBinary.load(SAMPLES / "mlp.mnlb"), load_s=0.0)
    bad = mnrt.Check("y", False, "float", (2,), 0, 0, 1.0, 1.0, 0.5, 1, (0,), [(0,)])
    good = mnrt.Check("y", True, "float", (2,), 0, 0, 0.0, 0.0, 1.0, 0, None, [])
    report.add_loop(0.001, 0.0, 0.0, [bad], {})
    report.add_loop(0.001, 0.0, 0.0, [good], {})
    assert not report.passed and report.checks == [bad]


@pytest.mark.parametrize(
    "arg", [5, {}, None, [1], 3.5, "a\x00b", b"not a binary"],
    ids=["int", "dict", "None", "list", "float", "nul", "bytes"],
)  # fmt: skip
def test_replay_refuses_what_is_not_a_binary_with_an_mnrt_error(arg):
    with pytest.raises(mnrt.MnrtError):
        mnrt.replay(arg)


def test_replay_takes_a_binarys_bytes():
    assert mnrt.replay((SAMPLES / "mlp.mnlb").read_bytes()).passed


def test_replay_checks_its_progress_callback_and_transport_first():
    with pytest.raises(mnrt.InvalidArgumentError, match="progress must be a function"):
        mnrt.replay(SAMPLES / "mlp.mnlb", progress=5)
    with pytest.raises(mnrt.InvalidArgumentError, match="transport must be a replay Transport"):
        mnrt.replay(SAMPLES / "mlp.mnlb", transport=5)  # was an AttributeError


@pytest.mark.parametrize("mapping", [{"0": 1}, {5: 3}])
def test_a_device_mapping_of_devices_the_binary_never_captured_is_refused(mapping):
    with pytest.raises(mnrt.InvalidArgumentError, match="did not capture"):
        mnrt.replay(SAMPLES / "mlp.mnlb", device=mapping)


def test_auto_replays_on_several_threads_never_pick_the_same_device():
    binary = LightBinary.load(SAMPLES / "traced_loop.mnlb")
    results: collections.Counter = collections.Counter()
    counting = threading.Lock()  # `results[k] += 1` from six threads loses counts without it
    start = threading.Barrier(6)

    def work() -> None:
        start.wait(HANG_S)
        for _ in range(8):
            try:
                verdict = "passed" if mnrt.replay(binary, loops=2).passed else "failed"
            except mnrt.MnrtError as e:
                verdict = str(e)
            with counting:
                results[verdict] += 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert results == {"passed": 48}


@pytest.mark.parametrize("flag", ["verify", "profile"])
def test_replay_takes_its_switches_as_bools_only(flag):
    with pytest.raises(mnrt.InvalidArgumentError, match=f"{flag} must be True or False"):
        mnrt.replay(SAMPLES / "mlp.mnlb", **{flag: "no"})


def test_partial_device_mapping_puts_the_other_devices_elsewhere():
    binary = two_device_binary((0, 1))
    # Captured device 1 on runner 0: captured device 0 must not take runner 0 first.
    report = mnrt.replay(binary, device={1: 0})
    assert report.passed
    report = mnrt.replay(two_device_binary((5, 2)), device={2: 0})
    assert report.passed


def test_too_few_runner_devices_are_refused_before_anything_runs(monkeypatch):
    binary = two_device_binary((0, 1))
    monkeypatch.setenv("MNRT_DEVICE_COUNT", "1")
    with pytest.raises(mnrt.DeviceBusyError, match="uses 2 devices"):
        mnrt.replay(binary)
    with pytest.raises(mnrt.InvalidArgumentError, match="two captured devices on one"):
        mnrt.replay(binary, device={0: 0, 1: 0})


def test_fresh_buffers_read_zeros_on_a_runner_device_cleared_to_a_pattern(dev, q):
    mnrt.begin_capture()
    fresh = dev.create_buffer((4,), "float", name="fresh")
    assert not q.enqueue_read_buffer(fresh).any()
    binary = mnrt.end_capture()
    with mnrt.open_device(3) as other:
        other.clear(pattern=0x3F800000)  # 1.0f
    report = mnrt.replay(binary, device=3)
    assert report.passed and not report.outputs["fresh"].any()


def test_replay_never_reads_the_device_state(small_binary, tmp_path, monkeypatch):
    # Replay fills fresh buffers with zeros whatever the state says, so a damaged state
    # file (which smi reports) must not stop a replay.
    home = tmp_path / "home"
    home.mkdir()
    (home / "devices.json").write_bytes(b"\xff not json")
    monkeypatch.setenv("MNRT_HOME", str(home))
    assert mnrt.replay(small_binary).passed


@pytest.mark.parametrize("placement", [{}, {"devices": 1}])
def test_a_replay_on_devices_dropped_a_moment_ago_collects_only_young_objects(
    small_binary, monkeypatch, placement
):
    # Every device open, then dropped without close(): the replay frees them by collecting
    # the young generations, not the whole heap (0.3 s in a heap of a million objects).
    import gc

    collected: list[int] = []
    real = gc.collect
    real()
    gc.disable()  # only the replay's own collections: none that runs by itself
    try:
        for _ in range(8):  # a device whose queue ran a command waits for the collector
            dev = mnrt.open_device("auto")
            dev.command_queue().enqueue_write_buffer(
                dev.create_buffer((2,), "float"), np.ones(2, np.float32)
            )
        del dev
        monkeypatch.setattr(
            gc, "collect", lambda generation=2: collected.append(generation) or real(generation)
        )
        assert mnrt.replay(small_binary, **placement).passed
    finally:
        gc.enable()
    assert collected == [1]
