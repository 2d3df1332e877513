"""Host API overhead: the cost of one enqueue, and whether the worker keeps up.

Figures (issue: device, host API and skeleton):
  enqueue_program of a 1-element program, per call, median     target <= 20 us
  100k such commands: total time (enqueue + drain) vs the same commands run inline
  on one thread (the serial baseline), and the backlog left when enqueueing ends
  round trips (reported): enqueue_program + finish, and a blocking read, median of 2000,
  against running the program's kernel inline

    python benchmarks/bench_host_overhead.py [--commands 100000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _common import verdict

import mnrt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=100_000)
    args = parser.parse_args()
    n = args.commands

    with mnrt.open_device("auto") as dev:
        a = dev.create_buffer((1,), mnrt.float32, name="a")
        b = dev.create_buffer((1,), mnrt.float32, name="b")
        prog = dev.create_program([mnrt.Kernel("relu", ["a"], ["b"])], name="tiny")
        binding = {"a": a, "b": b}
        q = dev.command_queue(0)
        q.enqueue_program(prog, binding)
        q.finish()

        # Serial baseline: the same command objects executed inline, no queue, no thread.
        from mnrt.host.commands import RunProgram

        plan = prog.plan(binding)
        cmds = [RunProgram(prog, plan, binding) for _ in range(n)]
        backend = dev._backend
        start = time.perf_counter()
        for cmd in cmds:
            cmd.execute(backend)
        serial = time.perf_counter() - start

        per_call = np.empty(n)
        enqueue = q.enqueue_program
        clock = time.perf_counter
        start = clock()
        for i in range(n):
            t0 = clock()
            enqueue(prog, binding)
            per_call[i] = clock() - t0
        enqueued = clock() - start
        backlog = q.commands_done
        q.finish()
        total = clock() - start
        executed = q.stats()["commands"] - 1

        def round_trip() -> None:
            enqueue(prog, binding)
            q.finish()

        trip = _median_us(round_trip)
        read = _median_us(lambda: q.enqueue_read_buffer(b))
        inline = _median_us(plan.steps[0].bound.run)

    median_us = statistics.median(per_call) * 1e6
    print(
        f"enqueue_program (1-element relu), median per call: {median_us:.2f} us"
        f"  (p99 {np.percentile(per_call, 99) * 1e6:.2f} us)  target <= 20 us "
        f"{verdict(median_us, 20, higher_is_better=False)}"
    )
    print(
        f"{n} commands: enqueued in {enqueued:.3f} s, all executed after {total:.3f} s "
        f"({executed} executed)"
    )
    print(
        f"  worker had run {backlog - 1} of {n} when enqueueing ended; drain after that: "
        f"{total - enqueued:.3f} s"
    )
    print(
        f"  serial baseline (same commands inline, one thread): {serial:.3f} s; "
        f"queue total / serial = {total / serial:.2f}x"
    )
    print(
        f"  worker throughput {executed / total / 1e3:.1f} k commands/s vs "
        f"host enqueue rate {n / enqueued / 1e3:.1f} k commands/s"
    )
    print(
        f"round trips, median of 2000: enqueue_program + finish {trip:.1f} us, blocking read "
        f"{read:.1f} us (the kernel alone, inline: {inline:.1f} us)"
    )


def _median_us(fn, runs: int = 2000) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


if __name__ == "__main__":
    main()
