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


class Batch:
    """A side that times itself: `run(repeat)` runs a block of `repeat` runs and returns
    their times (mnrt.replay's loops, each timed inside one call)."""

    def __init__(self, run: Callable[[int], list[float]]) -> None:
        self.run = run


def best_times(
    *sides: Callable[[], object] | Batch,
    repeat: int = 5,
    rounds: int = 3,
    settle_s: float = 0.05,
) -> tuple[float, ...]:
    """Fastest times of each side over `rounds` alternating blocks of `repeat` runs each,
    so that a slow spell on a shared machine hits every side alike. Between blocks all wait
    `settle_s`: a side's background threads (onnxruntime's pool spins for a while after
    each run) would otherwise take cores from the next side's first runs."""
    samples: list[list[float]] = [[] for _ in sides]
    for _ in range(rounds):
        for side, times in zip(sides, samples):
            if isinstance(side, Batch):
                times.extend(side.run(repeat))
            else:
                side()
                for _ in range(repeat):
                    start = time.perf_counter()
                    side()
                    times.append(time.perf_counter() - start)
            time.sleep(settle_s)
    return tuple(min(t) for t in samples)


def verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    ok = value >= target if higher_is_better else value <= target
    return "ok" if ok else "MISSED"
