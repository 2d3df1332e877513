"""Devices and buffers: listing, opening, allocation, freeing, clear and reset."""

from __future__ import annotations

import gc
import itertools
import threading
import weakref

import numpy as np
import pytest

import mnrt
from mnrt.device.memory import DeviceMemory, Fill
from mnrt.host.device import open_indices


def test_list_devices_default_eight_names():
    infos = mnrt.list_devices()
    assert [str(i) for i in infos[:2]] == ["0: mnc2emu0", "1: mnc2emu1"]
    assert len(infos) == 8 and all(i.arch == "mncore2" for i in infos)


def test_device_count_is_configurable(monkeypatch):
    monkeypatch.setenv("MNRT_DEVICE_COUNT", "2")
    assert len(mnrt.list_devices()) == 2
    with pytest.raises(mnrt.DeviceNotFoundError, match=r"devices are 0\.\.1"):
        mnrt.open_device(2)
    monkeypatch.setenv("MNRT_DEVICE_COUNT", "lots")
    with pytest.raises(mnrt.InvalidArgumentError, match="MNRT_DEVICE_COUNT"):
        mnrt.list_devices()


def test_open_auto_picks_free_devices_and_busy_is_an_error(monkeypatch):
    monkeypatch.setenv("MNRT_DEVICE_COUNT", "2")
    with mnrt.open_device() as a, mnrt.open_device("auto") as b:
        assert (a.index, b.index) == (0, 1)
        with pytest.raises(mnrt.DeviceBusyError, match="all 2 emulated devices are open"):
            mnrt.open_device()
        with pytest.raises(mnrt.DeviceBusyError, match="already open"):
            mnrt.open_device(0)
    with mnrt.open_device(1) as c:
        assert c.name == "mnc2emu1"


def test_closed_device_refuses_work():
    dev = mnrt.open_device(0)
    q = dev.command_queue()
    buf = dev.create_buffer((2,), "float")
    dev.close()
    with pytest.raises(mnrt.DeviceClosedError, match="open it again"):
        dev.create_buffer((2,), "float")
    with pytest.raises(mnrt.DeviceClosedError):
        q.enqueue_read_buffer(buf)
    with pytest.raises(mnrt.UseAfterFreeError):
        buf._storage()
    dev.close()  # closing twice is harmless


def test_buffer_properties(dev):
    b = dev.create_buffer((3, 5), mnrt.half, name="act")
    assert (b.shape, b.dtype, b.nbytes, b.name) == ((3, 5), mnrt.half, 30, "act")
    assert b.address % dev.spec.dram_alignment == 0 and b.address > 0
    other = dev.create_buffer(7, "int32")
    assert other.shape == (7,) and other.address >= b.address + 256


@pytest.mark.parametrize(
    ("shape", "dtype", "error"),
    [
        ((2, -1), "float", mnrt.ShapeError),
        ("abc", "float", mnrt.ShapeError),
        ((2.5,), "float", mnrt.ShapeError),
        ((2,), "float8", mnrt.DTypeError),
        ((2,), np.complex64, mnrt.DTypeError),
    ],
)
def test_create_buffer_rejects_bad_arguments(dev, shape, dtype, error):
    with pytest.raises(error):
        dev.create_buffer(shape, dtype)


def test_dtype_names_and_aliases():
    assert mnrt.dtype("half") is mnrt.half
    assert mnrt.dtype(np.float16) is mnrt.float16
    assert mnrt.dtype("float32") is mnrt.float32 is mnrt.dtype(np.float32)
    with pytest.raises(mnrt.DTypeError, match="'half'; IEEE binary16 is 'float16'"):
        mnrt.dtype("fp8")


def test_out_of_memory_names_request_and_free_space(dev):
    big = dev.create_buffer((8, 1024, 1024, 1024), "uint8", name="big")  # 8 GiB, lazily backed
    with pytest.raises(mnrt.OutOfMemoryError, match=r"buffer 'too_much'.*largest free block"):
        dev.create_buffer((9, 1024, 1024, 1024), "uint8", name="too_much")
    big.deallocate()
    with pytest.raises(mnrt.DeviceError, match="more than the device's"):
        dev.create_buffer((1 << 40,), "float", name="tebibytes")


def test_deallocate_frees_and_reuse_is_an_error(dev, q):
    b = dev.create_buffer((1024,), "float", name="tmp")
    used = dev.memory_info()["used_bytes"]
    b.deallocate()
    assert dev.memory_info()["used_bytes"] == used - 4096
    assert not b.is_allocated
    with pytest.raises(mnrt.UseAfterFreeError, match="already deallocated"):
        b.deallocate()
    with pytest.raises(mnrt.UseAfterFreeError, match="'tmp' was deallocated"):
        q.enqueue_write_buffer(b, np.zeros(1024, np.float32))


def test_buffer_of_another_device_is_rejected():
    with mnrt.open_device(0) as d0, mnrt.open_device(1) as d1:
        b1 = d1.create_buffer((2,), "float", name="remote")
        with pytest.raises(mnrt.DeviceMismatchError, match="belongs to device 1"):
            d0.command_queue().enqueue_write_buffer(b1, np.zeros(2, np.float32))


def test_clear_fills_live_and_new_buffers_and_persists(dev, q):
    b = dev.create_buffer((2,), "uint8")
    dev.clear(pattern=0xAB)
    np.testing.assert_array_equal(q.enqueue_read_buffer(b), [0xAB, 0xAB])
    c = dev.create_buffer((4,), "int32")
    assert (q.enqueue_read_buffer(c) == np.int32(np.uint32(0xABABABAB).view(np.int32))).all()
    index = dev.index
    dev.close()
    assert mnrt.list_devices()[index].fill == "pattern 0xab"
    with mnrt.open_device(index) as again:
        d = again.create_buffer((3,), "uint8")
        assert (again.command_queue().enqueue_read_buffer(d) == 0xAB).all()
        again.clear(seed=3)
        first = again.command_queue().enqueue_read_buffer(d)
        again.clear(seed=3)
        np.testing.assert_array_equal(again.command_queue().enqueue_read_buffer(d), first)
        again.clear(zero=True)
    assert mnrt.list_devices()[index].fill == "zero"


def test_fresh_memory_holds_the_fill_for_every_kind_of_use(dev, q):
    # A fresh buffer gets the fill only when a command first reads it: a program's input, a
    # read and a capture's snapshot all see it.
    dev.clear(pattern=0x3F80)  # the bits of float32 1.0039 in each 32-bit word
    fill = np.uint32(0x3F803F80).view(np.float32)
    try:
        x = dev.create_buffer((2, 3), "float")
        y = dev.create_buffer((2, 3), "float")
        neg = dev.create_program([mnrt.Kernel("neg", ["x"], ["y"])])
        q.enqueue_program(neg, {"x": x, "y": y})
        np.testing.assert_array_equal(q.enqueue_read_buffer(y), np.full((2, 3), -fill))
        np.testing.assert_array_equal(q.enqueue_read_buffer(x), np.full((2, 3), fill))
        z = dev.create_buffer((3,), "float")
        mnrt.begin_capture()
        q.enqueue_read_buffer(z)
        binary = mnrt.end_capture()
        report = mnrt.replay(binary)
        assert report.passed
        np.testing.assert_array_equal(next(iter(report.outputs.values())), np.full(3, fill))
    finally:
        dev.clear(zero=True)


def test_a_buffer_written_whole_is_never_filled(dev, q, monkeypatch):
    applied = []
    monkeypatch.setattr(Fill, "apply", lambda self, dest, address: applied.append(address))
    b = dev.create_buffer((1024, 1024), "float")
    q.enqueue_write_buffer(b, np.ones((1024, 1024), np.float32))
    assert q.enqueue_read_buffer(b).min() == 1.0
    c = dev.create_buffer((4,), "float")
    q.enqueue_read_buffer(c)
    assert applied == [c.address]
    # A program fills what it reads first (x), not what a kernel writes whole first (h, y),
    # even when a later kernel reads it (h) or writes it in place (y).
    x, h, y = (dev.create_buffer((4,), "float") for _ in range(3))
    prog = dev.create_program(
        [
            mnrt.Kernel("neg", ["x"], ["h"]),
            mnrt.Kernel("relu", ["h"], ["y"]),
            mnrt.Kernel("add", ["y", "h"], ["y"]),
        ]
    )
    q.enqueue_program(prog, {"x": x, "h": h, "y": y}, blocking=True)
    assert applied == [c.address, x.address]


def test_clear_pattern_width(dev, q):
    b = dev.create_buffer((8,), "uint8")
    try:
        dev.clear(pattern=0xFF, width=4)
        assert q.enqueue_read_buffer(b).tolist() == [255, 0, 0, 0] * 2
        assert mnrt.list_devices()[dev.index].fill == "pattern 0x000000ff"
        for bad in (3, 16, 1):  # not a width, too wide, too narrow for 0x1ff
            with pytest.raises(mnrt.InvalidArgumentError, match="width"):
                dev.clear(pattern=0x1FF, width=bad)
        with pytest.raises(mnrt.InvalidArgumentError, match="pattern only"):
            dev.clear(seed=1, width=4)
    finally:
        dev.clear(zero=True)


def test_clear_needs_exactly_one_fill(dev):
    with pytest.raises(mnrt.InvalidArgumentError, match="exactly one"):
        dev.clear()
    with pytest.raises(mnrt.InvalidArgumentError, match="exactly one"):
        dev.clear(zero=True, seed=1)


def test_reset_frees_everything(dev, q):
    b = dev.create_buffer((4,), "float")
    q.enqueue_write_buffer(b, np.ones(4, np.float32))
    dev.reset()
    assert dev.memory_info()["buffers"] == 0
    assert q.stats()["commands"] == 0
    with pytest.raises(mnrt.UseAfterFreeError):
        q.enqueue_read_buffer(b)
    fresh = dev.create_buffer((4,), "float")
    np.testing.assert_array_equal(q.enqueue_read_buffer(fresh), np.zeros(4))


def test_corrupt_state_file_gives_a_clear_error(tmp_path, monkeypatch):
    home = tmp_path / "state"
    home.mkdir()
    (home / "devices.json").write_text("{not json")
    monkeypatch.setenv("MNRT_HOME", str(home))
    with pytest.raises(mnrt.DeviceError, match="corrupt.*smi reset"):
        mnrt.list_devices()


def test_a_forked_child_gets_an_error_from_the_parents_devices_and_opens_its_own(
    in_forked_child,
):
    dev = mnrt.open_device(0)
    try:
        q = dev.command_queue()
        buf = dev.create_buffer((4,), "float")
        q.enqueue_write_buffer(buf, np.arange(4, dtype=np.float32))
        q.finish()  # the queue's worker thread is running: the child will not have it

        def child() -> int:
            try:
                q.enqueue_read_buffer(buf)
                return 2  # no error: wrong
            except mnrt.DeviceClosedError as e:
                if "forked" not in str(e) or "open devices in this process" not in str(e):
                    return 3
            with mnrt.open_device(0) as mine:  # the index is free again in the child
                b = mine.create_buffer((2,), "float")
                cq = mine.command_queue()
                cq.enqueue_write_buffer(b, np.ones(2, np.float32))
                return 0 if cq.enqueue_read_buffer(b).tolist() == [1.0, 1.0] else 5

        assert in_forked_child(child) == 0
        assert q.enqueue_read_buffer(buf).tolist() == [0.0, 1.0, 2.0, 3.0]  # parent unaffected
    finally:
        dev.close()


@pytest.mark.parametrize("spec", [5, None, [1], 1.5, (1, 2)])
def test_dtype_numpy_cannot_read_is_refused_not_taken_as_double(dev, spec):
    with pytest.raises(mnrt.DTypeError, match="unknown dtype"):
        dev.create_buffer((2,), spec)


@pytest.mark.parametrize(
    "kwargs", [{"pattern": "0xff"}, {"seed": 1.5}, {"pattern": True}, {"zero": "no"}]
)
def test_clear_arguments_of_the_wrong_type(dev, kwargs):
    with pytest.raises(mnrt.InvalidArgumentError, match="clear"):
        dev.clear(**kwargs)


def test_objects_of_a_closed_or_other_device(dev):
    buf = dev.create_buffer((4,), "float", name="old")
    prog = dev.create_program([mnrt.Kernel("relu", ["x"], ["y"])], name="relu")
    index = dev.index
    dev.close()
    with mnrt.open_device(index) as again, mnrt.open_device("auto") as other:
        q = again.command_queue(0)
        with pytest.raises(mnrt.UseAfterFreeError, match=f"'old' was freed when device {index}"):
            q.enqueue_read_buffer(buf)
        fresh = {"x": again.create_buffer((4,), "float"), "y": again.create_buffer((4,), "float")}
        with pytest.raises(mnrt.UseAfterFreeError, match="program 'relu' was freed"):
            q.enqueue_program(prog, fresh)
        theirs = other.create_program([mnrt.Kernel("relu", ["x"], ["y"])])
        with pytest.raises(mnrt.DeviceMismatchError, match="create it on the device"):
            q.enqueue_program(theirs, fresh)


HANG_S = 10  # a hang guard, not a timing


@pytest.fixture
def garbage(monkeypatch):
    """Fresh device memory holds 0xa5 bytes until filled: what np.empty may hand out (it
    reuses freed host memory), made the same on every run."""
    allocate = DeviceMemory.allocate

    def dirty(self, nbytes, what="buffer", filled=True):
        address, data = allocate(self, nbytes, what, filled)
        if not filled:
            data.fill(0xA5)
        return address, data

    monkeypatch.setattr(DeviceMemory, "allocate", dirty)


def test_what_a_failed_program_never_wrote_still_holds_the_fill(dev, q, garbage):
    x = dev.create_buffer((4,), "float", name="x")
    idx = dev.create_buffer((1,), "int32", name="idx")
    a, out, b = (dev.create_buffer(s, "float", name=n) for n, s in (("a", 4), ("out", 1), ("b", 1)))
    prog = dev.create_program(
        [
            mnrt.Kernel("neg", ["x"], ["a"]),
            mnrt.Kernel("gather", ["x", "idx"], ["out"]),  # index 9 of 4: fails
            mnrt.Kernel("neg", ["out"], ["b"]),  # never runs
        ]
    )
    q.enqueue_write_buffer(x, np.arange(1, 5, dtype=np.float32))
    q.enqueue_write_buffer(idx, np.array([9], np.int32))
    q.enqueue_program(prog, {"x": x, "idx": idx, "a": a, "out": out, "b": b})
    with pytest.raises(mnrt.DeviceExecutionError, match="gather"):
        q.finish()
    np.testing.assert_array_equal(q.enqueue_read_buffer(a), -np.arange(1, 5))  # it ran
    np.testing.assert_array_equal(q.enqueue_read_buffer(out), [0.0])
    np.testing.assert_array_equal(q.enqueue_read_buffer(b), [0.0])


def test_two_queues_reading_a_fresh_buffer_at_once_both_read_the_fill(dev, garbage, monkeypatch):
    x = dev.create_buffer((8,), "float")
    inside, release = threading.Event(), threading.Event()
    calls = itertools.count()
    apply = Fill.apply

    def slow_apply(self, dest, address):
        if next(calls) == 0:  # the first fill is still going in (a large one takes a while)
            inside.set()
            release.wait(HANG_S)
        apply(self, dest, address)

    monkeypatch.setattr(Fill, "apply", slow_apply)
    first: list[np.ndarray] = []
    q0, q1 = dev.command_queue(0), dev.command_queue(1)
    reader = threading.Thread(target=lambda: first.append(q0.enqueue_read_buffer(x)))
    reader.start()
    try:
        assert inside.wait(HANG_S)
        second = q1.enqueue_read_buffer(x)  # while q0's fill is going in
    finally:
        release.set()
        reader.join(HANG_S)
    np.testing.assert_array_equal(second, np.zeros(8))
    np.testing.assert_array_equal(first[0], np.zeros(8))


def test_a_fill_cut_short_by_an_interrupt_is_put_in_again(dev, q, garbage, monkeypatch):
    monkeypatch.setattr(q, "_work", lambda: None)  # the host thread runs every command
    x = dev.create_buffer((8,), "float")
    apply = Fill.apply
    calls = itertools.count()

    def interrupted_apply(self, dest, address):
        if next(calls) == 0:
            raise KeyboardInterrupt  # Ctrl-C before the fill went in
        apply(self, dest, address)

    monkeypatch.setattr(Fill, "apply", interrupted_apply)
    with pytest.raises(KeyboardInterrupt):
        q.enqueue_read_buffer(x)
    with pytest.raises(mnrt.DeviceExecutionError, match="KeyboardInterrupt"):
        q.finish()
    np.testing.assert_array_equal(q.enqueue_read_buffer(x), np.zeros(8))


def test_a_buffer_created_while_another_thread_clears_reads_as_a_fill(dev, q, garbage, monkeypatch):
    memory = dev._backend.memory
    clear = memory.clear
    made: list[mnrt.Buffer] = []

    def clear_then_create(fill):
        clear(fill)
        # Another thread's create_buffer, landing just after the live buffers were filled.
        made.append(dev.create_buffer((8,), "uint8"))

    monkeypatch.setattr(memory, "clear", clear_then_create)
    dev.clear(pattern=0x5A)
    np.testing.assert_array_equal(q.enqueue_read_buffer(made[0]), np.full(8, 0x5A))


def _open_use_and_drop(index: int | str) -> weakref.ref:
    """Open a device, start its queue's worker with a command, and drop it without close()."""
    dev = mnrt.open_device(index)
    q = dev.command_queue()
    buf = dev.create_buffer((4,), "float")
    q.enqueue_write_buffer(buf, np.arange(4, dtype=np.float32))
    return weakref.ref(dev)


def test_devices_dropped_without_close_release_their_index():
    # Before: the table of open devices held each strongly, so the second cycle failed
    # with DeviceBusyError (42 of 50 in the issue's count, depending on timing).
    threads = threading.active_count()
    for _ in range(50):
        _open_use_and_drop(0)
    for _ in range(50):
        _open_use_and_drop("auto")
    gc.collect()
    assert open_indices() == set()
    # The workers went back to the pool, to be reused: not a thread per dropped device
    # (up to one per device that waits for the collector at once, "auto" opening all 8).
    assert threading.active_count() <= threads + 8 + 2


def test_a_parked_worker_does_not_keep_its_dropped_device_alive():
    ref = _open_use_and_drop(3)
    dev = ref()
    assert dev is not None
    dev.command_queue().finish()  # the worker has run the write and waits for the next
    del dev
    gc.collect()
    assert ref() is None and 3 not in open_indices()


def test_a_device_still_referenced_stays_open():
    dev = mnrt.open_device(2)
    try:
        gc.collect()
        with pytest.raises(mnrt.DeviceBusyError, match="already open"):
            mnrt.open_device(2)
        assert dev.is_open and 2 in open_indices()
    finally:
        dev.close()
    assert 2 not in open_indices()


@pytest.mark.parametrize("name", ["x\nFAKE LINE: PASS", "x\x1b[2J", "nul\x00", "n" * 1025])
def test_names_a_binary_would_refuse_are_refused_at_the_call(dev, name):
    with pytest.raises(mnrt.InvalidArgumentError, match="cannot be stored in a light binary"):
        dev.create_buffer((2,), "float", name=name)
    with pytest.raises(mnrt.InvalidArgumentError, match="cannot be stored in a light binary"):
        dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])], name=name)
    with pytest.raises(mnrt.InvalidArgumentError, match="cannot be stored in a light binary"):
        mnrt.Kernel("exp", [name], ["y"])


def test_a_capture_description_must_be_printable():
    mnrt.begin_capture()
    with pytest.raises(mnrt.InvalidArgumentError, match="not printable"):
        mnrt.end_capture(description="line one\nPASS")
    mnrt.end_capture()


def _recording_collections(monkeypatch) -> list[int]:
    collected: list[int] = []
    real = gc.collect

    def collect(generation: int = 2) -> int:
        collected.append(generation)
        return real(generation)

    monkeypatch.setattr(gc, "collect", collect)
    return collected


def test_reopening_a_device_dropped_a_moment_ago_collects_only_young_objects(monkeypatch):
    # A full collection costs 0.3 s in a heap of a million objects (a notebook's, the test
    # suite's), and a loop that dropped and reopened a device paid it on every open.
    gc.collect()
    gc.disable()  # only the open's own collections: none that runs by itself
    try:
        _open_use_and_drop(5)
        collected = _recording_collections(monkeypatch)
        mnrt.open_device(5).close()
    finally:
        gc.enable()
    assert collected == [1]


def test_a_dropped_device_that_grew_old_is_freed_by_a_full_collection(monkeypatch):
    dev = mnrt.open_device(6)
    dev.command_queue().enqueue_write_buffer(
        dev.create_buffer((2,), "float"), np.ones(2, np.float32)
    )
    gc.collect()  # the device survives it: it is old now
    gc.disable()  # only the open's own collections: none that runs by itself
    try:
        del dev
        collected = _recording_collections(monkeypatch)
        mnrt.open_device(6).close()
    finally:
        gc.enable()
    assert collected == [1, 2]


def test_what_no_slot_view_writes_holds_the_fill(dev, q, garbage):
    """A buffer kernels reach only through views that leave part of it unwritten: that
    part holds the device's fill, not what fresh host memory held."""
    whole = dev.create_buffer((6,), "float", name="whole")
    x = dev.create_buffer((2,), "float", name="x")
    prog = dev.create_program(
        [mnrt.Kernel("neg", ["x"], ["part"])], views={"part": mnrt.SlotView("whole", 2, (2,))}
    )
    q.enqueue_write_buffer(x, np.array([1.0, 2.0], np.float32))
    q.enqueue_program(prog, {"x": x, "whole": whole})
    np.testing.assert_array_equal(q.enqueue_read_buffer(whole), [0, 0, -1, -2, 0, 0])
