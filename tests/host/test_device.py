"""Devices and buffers: listing, opening, allocation, freeing, clear and reset."""

from __future__ import annotations

import numpy as np
import pytest

import mnrt
from mnrt.device.memory import Fill


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
