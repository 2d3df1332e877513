"""Two emulated MN-Core 2 boards: device 0 computes, copies its result to device 1 over the
link, and device 1's queue waits on the copy's event before it computes on.

    h = tanh(x @ w0)          on device 0
    copy h -> device 1        device 0's queue, then record_event
    y = relu(h @ w1)          on device 1, after wait_event

Prints the result's agreement with numpy float32 and the modelled device time of each
board; the host waits for nothing between the two devices (the queues do).

    python samples/two_devices.py [--batch 16] [--capture samples/two_devices.mnlb]

With --capture, the run is recorded into one light binary spanning both devices (format
1.2: CopyBuffer, RecordEvent, WaitEvent); `mnrt run` replays it on two devices, or folded
onto one with `--devices 1`.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np

import mnrt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--capture", metavar="PATH", help="record the run into a light binary")
    args = parser.parse_args()
    b, n = args.batch, args.width

    rng = np.random.default_rng(7)
    x = rng.standard_normal((b, n)).astype(np.float32)
    w0 = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    w1 = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)

    recording = (
        mnrt.capture(args.capture, description="samples/two_devices.py: copy and event")
        if args.capture
        else contextlib.nullcontext()
    )
    with recording, mnrt.open_device(0) as d0, mnrt.open_device(1) as d1:
        q0, q1 = d0.command_queue(0), d1.command_queue(0)
        xb = d0.create_buffer((b, n), mnrt.float32, name="x")
        w0b = d0.create_buffer((n, n), mnrt.float32, name="w0")
        t0 = d0.create_buffer((b, n), mnrt.float32, name="t0")
        h0 = d0.create_buffer((b, n), mnrt.float32, name="h")
        h1 = d1.create_buffer((b, n), mnrt.float32, name="h_on_1")
        w1b = d1.create_buffer((n, n), mnrt.float32, name="w1")
        t1 = d1.create_buffer((b, n), mnrt.float32, name="t1")
        y = d1.create_buffer((b, n), mnrt.float32, name="y")
        stage0 = d0.create_program(
            [mnrt.Kernel("gemm", ["x", "w0"], ["t0"]), mnrt.Kernel("tanh", ["t0"], ["h"])],
            name="stage0",
        )
        stage1 = d1.create_program(
            [mnrt.Kernel("gemm", ["h", "w1"], ["t1"]), mnrt.Kernel("relu", ["t1"], ["y"])],
            name="stage1",
        )
        q0.enqueue_write_buffer(xb, x)
        q0.enqueue_write_buffer(w0b, w0)
        q1.enqueue_write_buffer(w1b, w1)
        q0.enqueue_program(stage0, {"x": xb, "w0": w0b, "t0": t0, "h": h0})
        q0.enqueue_copy_buffer(h0, h1)
        copied = q0.record_event()
        q1.wait_event(copied)
        q1.enqueue_program(stage1, {"h": h1, "w1": w1b, "t1": t1, "y": y})
        out = q1.enqueue_read_buffer(y, blocking=True)
        stats = [q0.stats(), q1.stats()]

    ref = np.maximum(np.tanh(x @ w0) @ w1, 0)
    err = np.abs(out - ref).max()
    print(f"two devices: stage0 on device 0, copy + event, stage1 on device 1 ({b}x{n})")
    print(f"max |error| vs numpy float32: {err:.3e}")
    for i, s in enumerate(stats):
        print(
            f"device {i}: modelled device time {s['device_time_s'] * 1e6:.2f} us, "
            f"energy {s['energy_j'] * 1e3:.3f} mJ, {s['commands']} commands"
        )
    if not err < 1e-4:
        raise SystemExit(f"FAILED: error {err} exceeds 1e-4")


if __name__ == "__main__":
    main()
