"""Several devices: what a copy costs in the model against the link's published figure, what
the emulator takes to do it against numpy, and a pipeline on the modelled timeline.

Figures (issue: several devices), each a ratio against a baseline of the same run:
  modelled copy time per MiB / the published figure's time per MiB, for a copy within one
    device (figure: DRAM at DeviceSpec.dram_bandwidth, each byte read and written once),
    between two boards of one host switch and between boards of two switches (figure:
    PCIe Gen5 x16, 64 GB/s per direction). The price is the one the live queue recorded
    for an `enqueue_copy_buffer` (q.history), checked against DeviceSpec.copy_cost.
  emulator wall time of that copy (enqueue + finish) / numpy's np.copyto of the same bytes.
  a 4-stage, 8-microbatch GPipe forward on the modelled timeline (mnrt.host.timeline) with
    activations crossing the link: bubble fraction against the analytic (p-1)/(m+p-1), and
    makespan against the same work folded onto one device.

    python benchmarks/bench_multidevice.py [--sizes 1,16,64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import functools
import itertools

import numpy as np
from _common import best_times

import mnrt
from mnrt.device.spec import MNCORE2, MiB
from mnrt.host.timeline import Span, fold, schedule

ROUTES = (("local", 0, 0), ("same switch", 0, 1), ("across switches", 0, 2))


def _figure_s(src: int, dst: int, nbytes: int) -> float:
    """The published figure's time for `nbytes`: the link's headline bandwidth between
    boards; within one board, DRAM reading and writing every byte."""
    if src == dst:
        return 2 * nbytes / MNCORE2.dram_bandwidth
    return nbytes / MNCORE2.link.published_bandwidth


def copies(sizes_mib: list[int], repeat: int) -> None:
    print("copy cost: modelled per MiB vs the published figure; emulator wall vs np.copyto")
    print(
        f"{'route':<16} {'MiB':>5} {'model us/MiB':>13} {'figure us/MiB':>14} {'ratio':>7}"
        f" {'numpy ms':>9} {'emul ms':>8} {'wall ratio':>10}"
    )
    devices = [mnrt.open_device(i) for i in range(3)]
    try:
        for (name, src, dst), mib in itertools.product(ROUTES, sizes_mib):
            nbytes = mib * MiB
            a = devices[src].create_buffer((nbytes // 4,), "float32", name="a")
            b = devices[dst].create_buffer((nbytes // 4,), "float32", name="b")
            q = devices[src].command_queue(0)
            q.enqueue_write_buffer(a, np.ones(nbytes // 4, np.float32))
            q.enqueue_copy_buffer(a, b)
            q.finish()
            modelled = q.history[-1].modelled
            expected = MNCORE2.copy_cost(src, dst, nbytes)
            if modelled != expected:
                raise SystemExit(f"the queue priced {name} as {modelled}, the spec {expected}")
            host_a, host_b = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)

            def emulated(q=q, a=a, b=b):
                q.enqueue_copy_buffer(a, b)
                q.finish()

            numpy_s, emulated_s = best_times(
                functools.partial(np.copyto, host_b, host_a), emulated, repeat=repeat
            )
            model_us, figure_us = (
                modelled.time_s / mib * 1e6,
                _figure_s(src, dst, nbytes) / mib * 1e6,
            )
            print(
                f"{name:<16} {mib:>5} {model_us:>13.3f} {figure_us:>14.3f}"
                f" {model_us / figure_us:>7.3f} {numpy_s * 1e3:>9.3f} {emulated_s * 1e3:>8.3f}"
                f" {emulated_s / numpy_s:>10.2f}"
            )
            a.deallocate()
            b.deallocate()
    finally:
        for d in devices:
            d.close()


def _gpipe(p: int, m: int, t: float, nbytes: int) -> list[Span]:
    spans, key = [], itertools.count()
    recorded: dict[tuple[int, int], int] = {}
    for stage, mb in itertools.product(range(p), range(m)):
        if stage:
            spans.append(
                Span(next(key), stage, 0, "wait_event", "wait", 0, 0, (recorded[stage - 1, mb],))
            )
        spans.append(Span(next(key), stage, 0, "program", f"F{stage}.{mb}", t, 0.0))
        if stage < p - 1:
            cost = MNCORE2.copy_cost(stage, stage + 1, nbytes)
            link = (stage, stage + 1)
            spans.append(
                Span(
                    next(key), stage, 0, "copy", "act", cost.time_s, cost.energy_j, (), link, nbytes
                )
            )
            recorded[stage, mb] = next(key)
            spans.append(Span(recorded[stage, mb], stage, 0, "record_event", "ev", 0.0, 0.0))
    return spans


def pipeline(p: int = 4, m: int = 8, t: float = 1e-3, nbytes: int = 4 * MiB) -> None:
    spans = _gpipe(p, m, t, nbytes)
    piped = schedule(spans)
    one = schedule(fold(spans, dict.fromkeys(range(p), 0)))
    analytic = (p - 1) / (m + p - 1)
    print(
        f"\nGPipe forward, {p} stages x {m} microbatches, {t * 1e3:g} ms a fragment, "
        f"{nbytes // MiB} MiB activations over the link:"
    )
    print(
        f"  bubble fraction {piped.bubble_fraction:.4f} vs analytic {analytic:.4f} "
        f"(difference {piped.bubble_fraction - analytic:+.4f}); modelled throughput vs one "
        f"device {one.makespan_s / piped.makespan_s:.3f}x (ideal {p * m / (m + p - 1):.3f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64", help="copy sizes in MiB")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    link = MNCORE2.link
    print(
        f"link: {link.name}, published {link.published_bandwidth / 1e9:.0f} GB/s per direction, "
        f"modelled payload bandwidth {link.bandwidth / 1e9:.2f} GB/s; DRAM "
        f"{MNCORE2.dram_bandwidth / 1e9:.0f} GB/s"
    )
    copies([int(s) for s in args.sizes.split(",")], args.repeat)
    pipeline()


if __name__ == "__main__":
    main()
