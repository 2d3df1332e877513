"""Device DRAM allocator: alignment, best fit, coalescing, clear errors; and fills."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
