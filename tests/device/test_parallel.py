"""Kernels split over host threads: every row exactly once, results that do not depend on
the thread count, errors and floating-point policy carried across, bad MNRT_THREADS."""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import operand, run

import mnrt
from mnrt.device import parallel


@pytest.fixture
def threads(monkeypatch):
    """Set the thread count, and make every call large enough to split."""

    def use(n: int) -> None:
        monkeypatch.setattr(parallel, "_threads", n)
        monkeypatch.setattr(parallel, "MIN_ELEMENTS_PER_THREAD", 1)

    return use


@settings(max_examples=50, deadline=None)
@given(rows=st.integers(0, 40), n=st.integers(1, 6))
def test_for_rows_covers_every_row_once(rows, n):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parallel, "_threads", n)
        mp.setattr(parallel, "MIN_ELEMENTS_PER_THREAD", 1)
        seen = np.zeros(rows, np.int64)
        lock = threading.Lock()

        def mark(part: slice) -> None:
            with lock:
                seen[part] += 1

        parallel.for_rows(mark, rows, 1)
        assert (seen == 1).all()


@pytest.mark.parametrize(
    ("name", "attrs", "shape"),
    [
        ("gelu", {}, (37, 129)),
        ("erf", {}, (5, 3, 64)),
        ("exp", {}, (1001,)),
        ("softmax", {"axis": -1}, (6, 7, 50)),
        ("softmax", {"axis": 1}, (6, 7, 50)),
        ("log_softmax", {"axis": 0}, (9, 40)),
        ("layernorm", {"axis": 1}, (11, 4, 30)),
        ("rmsnorm", {"axis": -1}, (13, 64)),
    ],
)
@pytest.mark.parametrize("dtype", ["float", "half"])
def test_results_do_not_depend_on_the_thread_count(threads, name, attrs, shape, dtype):
    x = operand(np.random.default_rng(3).standard_normal(shape) * 3, dtype)
    threads(1)
    one = run(name, x, **attrs)
    for n in (2, 3, 8):
        threads(n)
        np.testing.assert_array_equal(run(name, x, **attrs), one)


def test_a_failing_row_raises_in_the_caller(threads):
    threads(4)

    def fail_late(part: slice) -> None:
        if part.start > 0:
            raise ValueError(f"row {part.start}")

    with pytest.raises(ValueError, match="row"):
        parallel.for_rows(fail_late, 8, 1)


def test_pool_threads_follow_the_callers_floating_point_policy(threads):
    threads(4)
    x = np.full(4096, 1000.0, np.float32)
    out = np.empty_like(x)
    split = lambda xr, outr: np.exp(xr, out=outr)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(over="ignore"):
            parallel.by_rows(split, x, out, 1)
    assert np.isinf(out).all()
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        parallel.by_rows(split, x, out, 1)


@pytest.mark.parametrize("value", ["0", "-2", "lots", "100000"])
def test_a_bad_thread_count_is_reported_when_a_device_opens(monkeypatch, value):
    monkeypatch.setenv(parallel.ENV_THREADS, value)
    monkeypatch.setattr(parallel, "_threads", None)
    with pytest.raises(mnrt.InvalidArgumentError, match="MNRT_THREADS"):
        mnrt.open_device(0)
    monkeypatch.setenv(parallel.ENV_THREADS, "3")
    assert parallel.threads() == 3


def test_a_forked_child_gets_a_pool_of_its_own(threads, in_forked_child):
    threads(4)
    x = np.arange(4096, dtype=np.float32)
    parallel.for_rows(lambda part: time.sleep(0.05), 4, 1)  # busy tasks: every thread starts

    def split_in_child() -> int:  # must not wait on the parent's pool threads
        y = parallel.by_rows(lambda xr, outr: np.negative(xr, out=outr), x, None, 1)
        return 0 if (y == -x).all() else 1

    assert in_forked_child(split_in_child) == 0


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


@pytest.mark.parametrize("devices", [2, 4, 64])
def test_devices_running_at_once_share_blas_threads_and_give_them_back(devices):
    before = _blas_threads()
    with parallel.sharing_cores(devices):
        assert all(n == max(1, parallel.threads() // devices) for n in _blas_threads())
    assert _blas_threads() == before


def test_one_device_leaves_blas_alone():
    before = _blas_threads()
    with parallel.sharing_cores(1):
        assert _blas_threads() == before


def test_replays_on_several_threads_give_blas_its_own_limits_back_whatever_the_order():
    # Each thread saving and restoring the process-wide limit left the first one's limit
    # behind for good when they interleaved (a later single-device replay then rounded
    # differently from its capture).
    before = _blas_threads()
    first, second = parallel.sharing_cores(2), parallel.sharing_cores(4)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert all(n == max(1, parallel.threads() // 4) for n in _blas_threads())
    second.__exit__(None, None, None)
    assert _blas_threads() == before
    barrier = threading.Barrier(4)

    def replay_like() -> None:
        with parallel.sharing_cores(2):
            barrier.wait()  # every thread holds a share at once
        for _ in range(50):
            with parallel.sharing_cores(2):
                pass

    workers = [threading.Thread(target=replay_like) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert _blas_threads() == before
