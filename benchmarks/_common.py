"""Shared timing helpers for the benchmark scripts: each figure is a ratio against a
baseline measured in the same run, on the same machine."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Fastest wall time of `fn()` in seconds over `repeat` runs after `warmup` runs: the
    timeit convention, least disturbed by other work on the machine; both sides of every
    ratio are timed the same way."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def best_times(
    baseline: Callable[[], object],
    candidate: Callable[[], object],
    repeat: int = 5,
    rounds: int = 3,
    settle_s: float = 0.05,
) -> tuple[float, float]:
    """Fastest times of two functions over `rounds` alternating blocks of `repeat` runs each,
    so that a slow spell on a shared machine hits both sides alike. Between blocks both wait
    `settle_s`: a side's background threads (onnxruntime's pool spins for a while after
    each run) would otherwise take cores from the other side's first runs."""
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for fn, times in zip((baseline, candidate), samples):
            fn()
            for _ in range(repeat):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            time.sleep(settle_s)
    return min(samples[0]), min(samples[1])


def verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    ok = value >= target if higher_is_better else value <= target
    return "ok" if ok else "MISSED"
