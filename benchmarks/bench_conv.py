"""conv2d through the emulated device vs a direct numpy convolution, ResNet-50 shapes.

The direct reference accumulates one (C x O) contraction per kernel tap over strided views
of the padded input: the textbook loop over (kh, kw), vectorised over everything else.
Ratio = reference time / device time (above 1: the device path is faster). Also checks
that both agree.

    python benchmarks/bench_conv.py [--dtype float|half] [--batch 1]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import best_times

import mnrt
from mnrt.device.numerics import round_to_half

# (name, C, H, W, O, k, stride, pad): ResNet-50 layers at 224x224 input.
LAYERS = [
    ("conv1 7x7/2", 3, 224, 224, 64, 7, 2, 3),
    ("res2 1x1 64->64", 64, 56, 56, 64, 1, 1, 0),
    ("res2 3x3 64", 64, 56, 56, 64, 3, 1, 1),
    ("res2 1x1 64->256", 64, 56, 56, 256, 1, 1, 0),
    ("res3 3x3/2 128", 128, 56, 56, 128, 3, 2, 1),
    ("res4 3x3 256", 256, 14, 14, 256, 3, 1, 1),
    ("res4 1x1 1024->256", 1024, 14, 14, 256, 1, 1, 0),
    ("res5 3x3 512", 512, 7, 7, 512, 3, 1, 1),
]


def direct_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    n, _, h, wd = x.shape
    o, _, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - k) // stride + 1
    ow = (wd + 2 * pad - k) // stride + 1
    y = np.zeros((n, o, oh, ow), np.float32)
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j], optimize=True)
    return y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float", choices=["float", "half"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    dt = mnrt.dtype(args.dtype)

    print(f"conv2d, {args.dtype}, batch {args.batch}: direct numpy reference vs device")
    print(f"{'layer':<20} {'reference ms':>13} {'device ms':>10} {'ratio':>7} {'max rel err':>12}")
    ratios = []
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        for name, c, h, wd, o, k, s, p in LAYERS:
            x = rng.standard_normal((args.batch, c, h, wd), np.float32)
            w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
            if dt is mnrt.half:
                x, w = round_to_half(x), round_to_half(w)
            oh, ow = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
            xb = dev.create_buffer(x.shape, dt, name="x")
            wb = dev.create_buffer(w.shape, dt, name="w")
            yb = dev.create_buffer((args.batch, o, oh, ow), dt, name="y")
            q.enqueue_write_buffer(xb, x)
            q.enqueue_write_buffer(wb, w)
            prog = dev.create_program(
                [mnrt.Kernel("conv2d", ["x", "w"], ["y"], {"stride": (s, s), "padding": (p,) * 4})]
            )
            binding = {"x": xb, "w": wb, "y": yb}

            def run(prog=prog, binding=binding):
                q.enqueue_program(prog, binding)
                q.finish()

            t_ref, t_dev = best_times(
                lambda x=x, w=w, s=s, p=p: direct_conv(x, w, s, p), run, repeat=args.repeat
            )
            ref = direct_conv(x, w, s, p)
            got = q.enqueue_read_buffer(yb)
            err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
            ratios.append(t_ref / t_dev)
            print(
                f"{name:<20} {t_ref * 1e3:>13.2f} {t_dev * 1e3:>10.2f} "
                f"{t_ref / t_dev:>7.2f} {err:>12.2e}"
            )
            for b in (xb, wb, yb):
                b.deallocate()
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"geometric mean ratio (reference / device): {geo:.2f}")


if __name__ == "__main__":
    main()
