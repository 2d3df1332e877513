"""A four-stage pipeline over four emulated MN-Core 2 boards, GPipe-style: each board holds
one layer, microbatches flow from board to board, and each board works on the next
microbatch while the following board works on this one.

    for each microbatch m, stage s (on device s):
        wait for m's activation to arrive (wait_event), h = tanh(h @ w_s),
        copy h to device s+1 (copy_buffer), record_event for it

Every microbatch has its own activation buffers, so nothing waits but the data: the
modelled timeline of a replay (`mnrt run samples/pipeline.mnlb`) shows the pipeline's
bubble, and `--devices 2` or `--devices 1` replays it folded onto fewer boards.

    python samples/pipeline.py [--microbatches 4] [--capture samples/pipeline.mnlb]
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np

import mnrt

STAGES = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--capture", metavar="PATH", help="record the run into a light binary")
    args = parser.parse_args()
    mbs, b, n = args.microbatches, args.batch, args.width

    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((b, n)).astype(np.float32) for _ in range(mbs)]
    ws = [(rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32) for _ in range(STAGES)]

    recording = (
        mnrt.capture(args.capture, description="samples/pipeline.py: 4-stage GPipe forward")
        if args.capture
        else contextlib.nullcontext()
    )
    with recording, contextlib.ExitStack() as stack:
        devs = [stack.enter_context(mnrt.open_device(s)) for s in range(STAGES)]
        qs = [d.command_queue(0) for d in devs]
        weights, layers, acts = [], [], []
        for s, d in enumerate(devs):
            weights.append(d.create_buffer((n, n), mnrt.float32, name=f"w{s}"))
            layers.append(
                d.create_program(
                    [mnrt.Kernel("gemm", ["h", "w"], ["t"]), mnrt.Kernel("tanh", ["t"], ["out"])],
                    name=f"stage{s}",
                )
            )
            # Per microbatch: its input on this stage, a temporary and its output.
            acts.append(
                [
                    {
                        role: d.create_buffer((b, n), mnrt.float32, name=f"{role}{s}_{m}")
                        for role in ("in", "t", "out")
                    }
                    for m in range(mbs)
                ]
            )
            qs[s].enqueue_write_buffer(weights[s], ws[s])
        outputs = []
        for m in range(mbs):
            qs[0].enqueue_write_buffer(acts[0][m]["in"], xs[m])
            arrived = None
            for s in range(STAGES):
                a = acts[s][m]
                if arrived is not None:
                    qs[s].wait_event(arrived)
                qs[s].enqueue_program(
                    layers[s], {"h": a["in"], "w": weights[s], "t": a["t"], "out": a["out"]}
                )
                if s + 1 < STAGES:
                    qs[s].enqueue_copy_buffer(a["out"], acts[s + 1][m]["in"])
                    arrived = qs[s].record_event()
            outputs.append(qs[-1].enqueue_read_buffer(acts[-1][m]["out"], blocking=False))
        for q in qs:
            q.finish()
        stats = [q.stats() for q in qs]

    err = 0.0
    for x, out in zip(xs, outputs):
        ref = x
        for w in ws:
            ref = np.tanh(ref @ w)
        err = max(err, float(np.abs(out - ref).max()))
    print(f"pipeline: {STAGES} stages on {STAGES} devices, {mbs} microbatches of {b}x{n}")
    print(f"max |error| vs numpy float32: {err:.3e}")
    times = [s["device_time_s"] * 1e6 for s in stats]
    per_device = ", ".join(f"{t:.2f}" for t in times)
    print(f"modelled device time {sum(times):.2f} us over all devices ({per_device} us each)")
    if not err < 1e-4:
        raise SystemExit(f"FAILED: error {err} exceeds 1e-4")


if __name__ == "__main__":
    main()
