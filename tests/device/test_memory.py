"""Device DRAM allocator: alignment, best fit, coalescing, clear errors; and fills."""

from __future__ import annotations

import itertools
import mmap
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.device.memory import Allocator, DeviceMemory, Fill
from mnrt.errors import InvalidArgumentError, OutOfMemoryError, UseAfterFreeError

ALIGN = 256


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40_000)), max_size=120))
def test_random_alloc_free_keeps_invariants(ops):
    size = 1 << 20
    a = Allocator(size, ALIGN)
    live: dict[int, int] = {}
    for do_alloc, n in ops:
        if do_alloc or not live:
            try:
                addr = a.allocate(n)
            except OutOfMemoryError:
                assert a.largest_free < n
                continue
            assert addr % ALIGN == 0 and addr >= ALIGN
            live[addr] = -(-n // ALIGN) * ALIGN
        else:
            addr = sorted(live)[n % len(live)]
            a.free(addr)
            del live[addr]
        spans = sorted(live.items())
        for (s0, n0), (s1, _) in itertools.pairwise(spans):
            assert s0 + n0 <= s1, "live blocks overlap"
        assert a.used_bytes == sum(live.values())  # the running total, checked by hand
        assert a.free_bytes == sum(a._free_sizes.values()) == size - ALIGN - a.used_bytes
    for addr in list(live):
        a.free(addr)
    assert a.largest_free == size - ALIGN, "freeing everything must coalesce to one block"


def test_best_fit_reuses_the_smallest_hole():
    a = Allocator(1 << 20, ALIGN)
    x = a.allocate(4096)
    a.allocate(256)
    y = a.allocate(1024)
    a.allocate(256)
    a.free(x)
    a.free(y)
    assert a.allocate(1000) == y


def test_out_of_memory_names_request_largest_block_and_total():
    a = Allocator(64 * 1024, ALIGN)
    blocks = [a.allocate(8 * 1024) for _ in range(7)]
    a.free(blocks[1])
    a.free(blocks[3])
    with pytest.raises(OutOfMemoryError) as e:
        a.allocate(12 * 1024, "buffer 'big'")
    msg = str(e.value)
    assert "buffer 'big'" in msg and "12288 bytes" in msg
    assert "largest free block is 8.00 KiB" in msg and "total free" in msg


def test_double_free_is_an_error():
    a = Allocator(1 << 16, ALIGN)
    x = a.allocate(100)
    a.free(x)
    with pytest.raises(UseAfterFreeError):
        a.free(x)


def test_fills():
    mem = DeviceMemory(1 << 20, ALIGN)
    addr, zero = mem.allocate(16)
    assert not zero.any()
    mem.clear(Fill.of(pattern=0xDEADBEEF))
    assert zero[:4].tobytes() == bytes.fromhex("efbeadde")
    _, fresh = mem.allocate(8)
    assert fresh[:4].tobytes() == bytes.fromhex("efbeadde")
    mem.clear(Fill.of(seed=5))
    first = zero.copy()
    mem.clear(Fill.of(seed=5))
    np.testing.assert_array_equal(zero, first)
    assert addr == ALIGN


@pytest.mark.parametrize(
    "kwargs", [{}, {"zero": True, "seed": 1}, {"pattern": 1 << 70}, {"seed": -1}]
)
def test_fill_arguments_are_checked(kwargs):
    with pytest.raises(InvalidArgumentError):
        Fill.of(**kwargs)


def test_clear_while_another_thread_allocates():
    mem = DeviceMemory(1 << 20, 256)
    for _ in range(3):
        mem.allocate(1024)
    apply = Fill.apply
    calls = []

    def allocating_meanwhile(self, dest, address):  # as another thread would, mid-clear
        calls.append(address)
        if len(calls) == 1:
            mem.allocate(1024)
        apply(self, dest, address)

    Fill.apply = allocating_meanwhile
    try:
        mem.clear(Fill.of(pattern=0xAB))
    finally:
        Fill.apply = apply
    assert len(mem._backing) == 4  # no "dictionary changed size during iteration"
    assert all((data == 0xAB).all() for data in mem._backing.values())


# --- lazy host memory: DRAM costs the host only what is touched ------------------------

_LIMITED = """
import resource, sys
limit = 2 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import numpy as np
import mnrt
{body}
"""


def _run_limited(body: str, *args: str) -> subprocess.CompletedProcess:
    """Run `body` in a fresh interpreter limited to 2 GiB of address space."""
    return subprocess.run(
        [sys.executable, "-c", _LIMITED.format(body=textwrap.dedent(body)), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_reserving_dram_costs_no_host_memory():
    mem = DeviceMemory(16 << 30, ALIGN)
    addresses = [mem.reserve(64 << 20, f"buffer 'b{i}'") for i in range(3)]
    assert mem.backed_bytes == 0
    data = mem.backing(addresses[1])
    assert data.nbytes == 64 << 20 and data.flags.c_contiguous
    assert mem.backing(addresses[1]) is data  # one contiguous array, made once
    mem.free(addresses[1])
    assert mem.backed_bytes == 0


def test_a_buffer_first_touched_after_a_clear_reads_the_fill(dev, q):
    untouched = dev.create_buffer((8,), "uint8")
    touched = dev.create_buffer((8,), "uint8")
    q.enqueue_write_buffer(touched, np.zeros(8, np.uint8))
    dev.clear(pattern=0x5A)
    np.testing.assert_array_equal(q.enqueue_read_buffer(untouched), np.full(8, 0x5A))
    np.testing.assert_array_equal(q.enqueue_read_buffer(touched), np.full(8, 0x5A))


def test_every_devices_dram_is_created_under_a_2_gib_limit():
    done = _run_limited(
        """
        devs = [mnrt.open_device(i) for i in range(8)]
        for d in devs:
            for i in range(4):
                d.create_buffer(((1 << 30) - 1024,), "float32", name=f"b{i}")  # 4 x 4 GiB
        small = devs[7].create_buffer((4,), "float32")  # within the 16 KiB left
        q = devs[7].command_queue(0)
        q.enqueue_write_buffer(small, np.arange(4, dtype=np.float32))
        print(q.enqueue_read_buffer(small).sum())
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "6.0"


def test_touching_more_than_the_host_holds_is_a_named_out_of_memory_error():
    done = _run_limited(
        """
        dev = mnrt.open_device(0)
        big = dev.create_buffer((3 << 30,), "float32", name="huge")
        try:
            dev.command_queue(0).enqueue_read_buffer(big)
        except mnrt.OutOfMemoryError as e:
            print(type(e).__name__, e)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OutOfMemoryError out of host memory")
    assert "'huge'" in done.stdout and "12.00 GiB" in done.stdout


def test_a_12_gib_buffer_replays_under_a_2_gib_limit(tmp_path):
    path = tmp_path / "big.mnlb"
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        dev.create_buffer((3 << 30,), "float32", name="big")  # 12 GiB, never touched
        x = dev.create_buffer((4,), "float32", name="x")
        q.enqueue_write_buffer(x, np.arange(4, dtype=np.float32))
        q.enqueue_read_buffer(x)
        mnrt.end_capture().save(path)
    assert path.stat().st_size < 4096
    done = _run_limited(
        """
        from mnrt.runner.cli import cli
        cli(["run", sys.argv[1]], prog_name="mnrt")
        """,
        str(path),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("PASS")


def test_a_binary_filling_every_devices_dram_replays_on_a_few_gib(tmp_path):
    path = tmp_path / "full.mnlb"
    devs = [mnrt.open_device(i) for i in range(8)]
    try:
        mnrt.begin_capture()
        for d in devs:
            for i in range(4):
                d.create_buffer(((1 << 30) - 1024,), "float32", name=f"b{i}")  # 16 GiB in all
        x = devs[7].create_buffer((4,), "float32", name="x")
        q = devs[7].command_queue(0)
        q.enqueue_write_buffer(x, np.arange(4, dtype=np.float32))
        q.enqueue_read_buffer(x)
        mnrt.end_capture().save(path)
    finally:
        for d in devs:
            d.close()
    done = _run_limited(
        """
        import importlib
        replay_module = importlib.import_module("mnrt.replay")
        replay_module.host_memory_bytes = lambda: 4 << 30  # a machine with 4 GiB of RAM
        report = mnrt.replay(sys.argv[1])
        print(report.verdict)
        """,
        str(path),
    )
    assert done.returncode == 0, done.stderr  # before: refused, 128 GiB > 4 GiB of RAM
    assert done.stdout.strip() == "PASS"


def test_large_allocations_are_backed_by_anonymous_maps_small_ones_by_numpy():
    # Large backing memory avoids numpy's huge-page advice (slow first touch here); both
    # kinds are writable uint8 arrays of the requested size.
    from mnrt.device import memory

    small, large = memory._host_bytes(64), memory._host_bytes(memory._MMAP_FROM)
    assert small.size == 64 and large.size == memory._MMAP_FROM
    assert small.flags.writeable and large.flags.writeable
    assert isinstance(large.base, memoryview) and isinstance(large.base.obj, mmap.mmap)
    assert small.base is None
