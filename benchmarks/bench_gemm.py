"""GEMM through the emulated device vs numpy's own matmul, measured in one run.

Figures (issue: device, host API and skeleton):
  f32 GEMM via device / numpy f32 matmul           target >= 0.90   (numpy time / device time)
  half GEMM via device / numpy f32 matmul          target >= 0.60
  half GEMM via device vs numpy float16 matmul     target >= 100x faster

Device time is enqueue_program + finish on buffers already on the device; the half GEMM
reads half inputs, multiplies in float32 and rounds the output to half. The emulator reuses
widened (decoded) inputs while their bits are unchanged, as with weights; the "cold" row
alternates between two different `a` buffers so every run decodes both inputs again.

    python benchmarks/bench_gemm.py [--sizes 1024 2048 4096] [--f16-sizes 512]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import best_time, best_times, verdict

import mnrt


def device_gemm(dev, q, n: int, dtype, a: np.ndarray, b: np.ndarray):
    ab = dev.create_buffer((n, n), dtype, name="a")
    bb = dev.create_buffer((n, n), dtype, name="b")
    yb = dev.create_buffer((n, n), dtype, name="y")
    q.enqueue_write_buffer(ab, a)
    q.enqueue_write_buffer(bb, b)
    prog = dev.create_program([mnrt.Kernel("gemm", ["a", "b"], ["y"])], name=f"gemm{n}")
    binding = {"a": ab, "b": bb, "y": yb}

    def run():
        q.enqueue_program(prog, binding)
        q.finish()

    return run, (ab, bb, yb)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--f16-sizes", type=int, nargs="*", default=[512])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    print(f"{'figure':<44} {'n':>5} {'baseline ms':>12} {'device ms':>10} {'ratio':>8}  target")
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        for n in args.sizes:
            a = rng.standard_normal((n, n), np.float32)
            b = rng.standard_normal((n, n), np.float32)
            reps = args.repeat if n <= 2048 else 3
            for dtype, name, target in (
                (mnrt.float32, "f32 GEMM device/numpy f32 (numpy/device)", 0.90),
                (mnrt.half, "half GEMM device/numpy f32 (numpy/device)", 0.60),
            ):
                run, bufs = device_gemm(dev, q, n, dtype, a, b)
                t_np, t_dev = best_times(lambda a=a, b=b: a @ b, run, repeat=reps)
                ratio = t_np / t_dev
                print(
                    f"{name:<44} {n:>5} {t_np * 1e3:>12.2f} {t_dev * 1e3:>10.2f} "
                    f"{ratio:>8.3f}  >= {target} {verdict(ratio, target)}"
                )
                if dtype is mnrt.half:
                    a2 = dev.create_buffer((n, n), dtype, name="a2")
                    q.enqueue_write_buffer(a2, -a)
                    prog = dev.create_program([mnrt.Kernel("gemm", ["a", "b"], ["y"])])
                    flip = [
                        {"a": a2, "b": bufs[1], "y": bufs[2]},
                        {"a": bufs[0], "b": bufs[1], "y": bufs[2]},
                    ]

                    def cold(prog=prog, flip=flip):
                        flip.reverse()
                        q.enqueue_program(prog, flip[0])
                        q.finish()

                    t_np, t_cold = best_times(lambda a=a, b=b: a @ b, cold, repeat=reps)
                    name = "  half GEMM, cold (inputs change every run)"
                    print(
                        f"{name:<44} {n:>5} {t_np * 1e3:>12.2f} {t_cold * 1e3:>10.2f} "
                        f"{t_np / t_cold:>8.3f}  (reported)"
                    )
                    a2.deallocate()
                for buf in bufs:
                    buf.deallocate()
        for n in args.f16_sizes:
            a = rng.standard_normal((n, n), np.float32)
            b = rng.standard_normal((n, n), np.float32)
            a16, b16 = a.astype(np.float16), b.astype(np.float16)
            t_f16 = best_time(lambda a16=a16, b16=b16: a16 @ b16, 1, warmup=0)
            run, bufs = device_gemm(dev, q, n, mnrt.half, a, b)
            t_dev = best_time(run, args.repeat)
            speedup = t_f16 / t_dev
            name = "half GEMM device vs numpy float16 (speedup)"
            print(
                f"{name:<44} {n:>5} {t_f16 * 1e3:>12.2f} {t_dev * 1e3:>10.2f} "
                f"{speedup:>7.0f}x  >= 100x {verdict(speedup, 100)}"
            )
            for buf in bufs:
                buf.deallocate()


if __name__ == "__main__":
    main()
