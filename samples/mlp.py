"""MLP forward pass on an emulated MN-Core 2, in mixed precision.

Weights and activations feeding the GEMMs are MN-Core half (1-6-9); GEMMs accumulate in
float32 and write float32, elementwise work runs in float32. Prints the output, its error
against a float64 numpy reference, and the modelled device time and energy.

    python samples/mlp.py [--batch 64] [--device auto] [--capture samples/mlp.mnlb]
                          [--fingerprints]

With --capture, the run is recorded into a light binary (weights, program, input and the
output as a golden) that `mnrt run` replays and verifies with nothing else installed; with
--fingerprints as well, every kernel's output is fingerprinted for `mnrt run --locate`
(samples/mlp_fingerprinted.mnlb is such a capture, made by format 1.2).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools

import numpy as np

import mnrt


def build(dev: mnrt.Device, batch: int, sizes: list[int]):
    """Buffers and one program for a ReLU MLP with GELU hidden layers."""
    bufs = {"x": dev.create_buffer((batch, sizes[0]), mnrt.half, name="x")}
    kernels = []
    src = "x"
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        last = i == len(sizes) - 2
        bufs[f"w{i}"] = dev.create_buffer((fan_in, fan_out), mnrt.half, name=f"w{i}")
        bufs[f"b{i}"] = dev.create_buffer((fan_out,), mnrt.float32, name=f"b{i}")
        bufs[f"z{i}"] = dev.create_buffer((batch, fan_out), mnrt.float32, name=f"z{i}")
        kernels.append(mnrt.Kernel("gemm", [src, f"w{i}", f"b{i}"], [f"z{i}"]))
        if last:
            bufs["y"] = dev.create_buffer((batch, fan_out), mnrt.float32, name="y")
            kernels.append(mnrt.Kernel("relu", [f"z{i}"], ["y"]))
        else:
            bufs[f"h{i}"] = dev.create_buffer((batch, fan_out), mnrt.float32, name=f"h{i}")
            bufs[f"a{i}"] = dev.create_buffer((batch, fan_out), mnrt.half, name=f"a{i}")
            kernels.append(mnrt.Kernel("gelu", [f"z{i}"], [f"h{i}"]))
            kernels.append(mnrt.Kernel("cast", [f"h{i}"], [f"a{i}"], {"to": "half"}))
            src = f"a{i}"
    return bufs, dev.create_program(kernels, name="mlp")


def reference(x: np.ndarray, params: dict[str, np.ndarray], layers: int) -> np.ndarray:
    from math import erf

    verf = np.vectorize(erf)
    h = x.astype(np.float64)
    for i in range(layers):
        h = h @ params[f"w{i}"].astype(np.float64) + params[f"b{i}"]
        h = np.maximum(h, 0) if i == layers - 1 else 0.5 * h * (1 + verf(h / np.sqrt(2)))
    return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--capture", metavar="PATH", help="record the run into a light binary")
    parser.add_argument(
        "--fingerprints", action="store_true", help="fingerprint every kernel as it captures"
    )
    args = parser.parse_args()
    device = args.device if args.device == "auto" else int(args.device)

    sizes = [256, 512, 512, 10]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, sizes[0])).astype(np.float32)
    params = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        params[f"w{i}"] = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(
            np.float32
        )
        params[f"b{i}"] = (0.1 * rng.standard_normal(fan_out)).astype(np.float32)

    recording = (
        mnrt.capture(
            args.capture,
            description="samples/mlp.py: mixed-precision MLP forward",
            fingerprints=args.fingerprints,
        )
        if args.capture
        else contextlib.nullcontext()
    )
    with recording, mnrt.open_device(device) as dev:
        bufs, prog = build(dev, args.batch, sizes)
        q = dev.command_queue(0)
        q.enqueue_write_buffer(bufs["x"], x)
        for name, value in params.items():
            q.enqueue_write_buffer(bufs[name], value)
        q.enqueue_program(prog, {slot: bufs[slot] for slot in prog.slots})
        y = q.enqueue_read_buffer(bufs["y"], blocking=True)
        stats = q.stats()

    ref = reference(x, params, len(sizes) - 1)
    err = np.abs(y - ref).max()
    print(f"device {dev.index} ({dev.name}): MLP {'-'.join(map(str, sizes))}, batch {args.batch}")
    print(f"output[0] = {np.array2string(y[0], precision=4)}")
    print(f"max |error| vs float64 reference: {err:.3e} (mixed precision: half GEMM inputs)")
    print(
        f"modelled device time {stats['device_time_s'] * 1e6:.2f} us, "
        f"energy {stats['energy_j'] * 1e3:.3f} mJ over {stats['commands']} commands"
    )
    if not err < 5e-2:
        raise SystemExit(f"FAILED: error {err} exceeds 5e-2")


if __name__ == "__main__":
    main()
