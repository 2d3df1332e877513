"""Capture overhead counted in instructions, which vary far less between runs than wall time.

Wall time on a shared VM swings by 20-30% from one run to the next, more than the 10% the
capture-overhead target allows, so this complements bench_capture.py section 1 with a
measure that does not depend on what other tenants do: valgrind's callgrind counts the
instructions the process executes (host and queue-worker threads together). Each
configuration runs in a child process at N and 2N calls; the difference is the cost of N
calls, free of interpreter start-up. Figure: capture on / off, target <= 1.10. The counts
are not exactly repeatable: which thread runs each queued command (the worker, or a host
thread waiting for it) differs between runs, moving (a) by a few percent.

    python benchmarks/bench_capture_icount.py [--calls 3000]    (needs valgrind; ~2 min)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

import numpy as np

WORKLOADS = ("inference", "stream")


def child(workload: str, capture: bool, calls: int) -> None:
    """The measured process: set up, optionally begin a capture, run `calls` host calls."""
    import mnrt

    dev = mnrt.open_device(0)
    q = dev.command_queue(0)
    x = dev.create_buffer((16,), mnrt.float32, name="x")
    h = dev.create_buffer((16,), mnrt.float32, name="h")
    y = dev.create_buffer((16,), mnrt.float32, name="y")
    prog = dev.create_program(
        [mnrt.Kernel("relu", ["x"], ["h"]), mnrt.Kernel("add", ["h", "x"], ["y"])]
    )
    binding = {"x": x, "h": h, "y": y}
    inputs = list(np.random.default_rng(0).standard_normal((calls, 16), np.float32))
    q.enqueue_write_buffer(x, inputs[0])
    q.finish()
    if capture:
        mnrt.begin_capture()
    if workload == "inference":
        for data in inputs[: calls // 3]:
            q.enqueue_write_buffer(x, data)
            q.enqueue_program(prog, binding)
            q.enqueue_read_buffer(y)
    else:
        for _ in range(calls):
            q.enqueue_program(prog, binding)
    q.finish()
    os._exit(0)  # the count stops here: no end_capture, no interpreter teardown


def count(workload: str, capture: bool, calls: int) -> int:
    """Instructions the child executes, from callgrind's summary line."""
    cmd = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--fair-sched=yes",
        sys.executable, __file__, "--child", workload, str(int(capture)), str(calls),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--child", nargs=3, metavar=("WORKLOAD", "CAPTURE", "CALLS"))
    args = parser.parse_args()
    if args.child:
        workload, capture, calls = args.child
        child(workload, capture == "1", int(calls))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    n = args.calls
    print(
        f"capture overhead in instructions (callgrind), cost of {n} host calls = count at "
        f"{2 * n} minus count at {n}"
    )
    print(
        f"{'workload':<40} {'off Minstr':>11} {'on Minstr':>10} {'on/off':>7} "
        f"{'instr/call':>10}  target"
    )
    for workload in WORKLOADS:
        off = count(workload, False, 2 * n) - count(workload, False, n)
        on = count(workload, True, 2 * n) - count(workload, True, n)
        ratio = on / off
        label = {"inference": "(a) inference loop: write,program,read",
                 "stream": "(b) enqueue stream: programs"}[workload]  # fmt: skip
        verdict = "ok" if ratio <= 1.10 else "MISSED"
        print(
            f"{label:<40} {off / 1e6:>11.1f} {on / 1e6:>10.1f} {ratio:>7.3f} "
            f"{(on - off) / n:>10.0f}  <= 1.10 {verdict}"
        )


if __name__ == "__main__":
    main()
