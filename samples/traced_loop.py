"""A device trace captured once and replayed N times: an explicit-Euler ODE step.

    s <- s + dt * tanh(s @ W)

The step is one program; it is recorded into a device trace (nothing runs while capturing,
as with tt-metal traces and CUDA Graphs) and the trace is replayed `--steps` times. Prints
the final state, its agreement with the same loop in numpy float32, and modelled time.

    python samples/traced_loop.py [--steps 100] [--size 128] [--capture PATH]

With --capture, the run (including the device trace and its replays) is recorded into a
light binary; the final state is its golden.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np

import mnrt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--capture", metavar="PATH", help="record the run into a light binary")
    args = parser.parse_args()
    device = args.device if args.device == "auto" else int(args.device)
    n = args.size

    rng = np.random.default_rng(1)
    s0 = rng.standard_normal((1, n)).astype(np.float32)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    dt = np.array([0.05], np.float32)

    recording = (
        mnrt.capture(args.capture, description="samples/traced_loop.py: traced Euler steps")
        if args.capture
        else contextlib.nullcontext()
    )
    with recording, mnrt.open_device(device) as dev:
        s = dev.create_buffer((1, n), mnrt.float32, name="s")
        wb = dev.create_buffer((n, n), mnrt.float32, name="w")
        dtb = dev.create_buffer((1,), mnrt.float32, name="dt")
        t1 = dev.create_buffer((1, n), mnrt.float32, name="t1")
        step = dev.create_program(
            [
                mnrt.Kernel("gemm", ["s", "w"], ["t1"]),
                mnrt.Kernel("tanh", ["t1"], ["t1"]),
                mnrt.Kernel("mul", ["t1", "dt"], ["t1"]),
                mnrt.Kernel("add", ["s", "t1"], ["s"]),
            ],
            name="euler_step",
        )
        q = dev.command_queue(0)
        for buf, value in ((s, s0), (wb, w), (dtb, dt)):
            q.enqueue_write_buffer(buf, value)

        tid = q.begin_trace_capture()
        q.enqueue_program(step, {"s": s, "w": wb, "dt": dtb, "t1": t1})
        q.end_trace_capture(tid)
        for _ in range(args.steps):
            q.replay_trace(tid)
        final = q.enqueue_read_buffer(s, blocking=True)
        dev.release_trace(tid)
        stats = q.stats()

    ref = s0.copy()
    for _ in range(args.steps):
        ref = ref + dt * np.tanh(ref @ w)
    err = np.abs(final - ref).max()
    print(f"device {dev.index} ({dev.name}): {args.steps} trace replays of a {n}-wide Euler step")
    print(f"final state[:6] = {np.array2string(final[0, :6], precision=5)}")
    print(f"max |error| vs numpy float32 loop: {err:.3e}")
    print(
        f"modelled device time {stats['device_time_s'] * 1e6:.2f} us "
        f"({stats['device_time_s'] / args.steps * 1e6:.3f} us per step), "
        f"energy {stats['energy_j'] * 1e3:.3f} mJ"
    )
    if not err < 1e-4:
        raise SystemExit(f"FAILED: error {err} exceeds 1e-4")


if __name__ == "__main__":
    main()
