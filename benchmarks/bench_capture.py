"""Light binary: capture overhead, end_capture serialisation, open, replay and size.

Figures (issue: light binary format, capture and replay), each against a baseline measured
in the same run:
  capture overhead: 10k tiny host calls, capture on / off        target <= 1.10
    (a) inference loop: write 16 floats, 2-kernel program, blocking read, x 3334
    (b) enqueue stream: 10k non-blocking 1-element enqueue_program, then finish()
    (c) two devices: copy 16 floats, record_event, wait_event on the other device, x 3334
  end_capture serialisation of those 10k-command logs, commands/s target >= 200k/s
  open a binary with 1 GiB of payload: LightBinary.load            target <= 20 ms
    (and a 1 MiB-payload one: the cost must not grow with payload), vs pickle.load
    of the same arrays
  replay vs live: samples/mlp.py's device work vs mnrt.replay of its capture
                                                        replay / live   target <= 1.0
    (reported too: the same for the 10k-command inference loop, and end to end)
  size: 100 writes of one 4 MiB array store one blob; zstd ratio of samples/mlp.mnlb
  capture of a compiled call (light models at O3; needs onnx): weights recorded from the
    arrays they were uploaded from vs copied out of device memory, wall time and minor
    page faults a capture                                  vouched / copied (lower better)

Timed regions: the overhead loop includes the final finish() (wall time until the device
is done) and not end_capture; off and on runs alternate, fastest of each, each run starting
after a gc.collect(), with the time spent in the garbage collector shown alongside. The
whole run is pinned to one CPU (see `one_cpu`; --no-pin to turn that off). end_capture is timed
on the same captures. Loads are timed with the files in the OS page cache (just written),
fastest of several; "+read all" shows what the lazy load defers. Replay's time is
`report.timings["wall_s"]` (one loop: open device, create, write stored bits, run, read;
not load, validation, golden checks or close); live is the same device work from
samples/mlp.py, from open_device to the output read back (writes round float32 to half).

    python benchmarks/bench_capture.py [--only overhead,serialise,open,replay,size,compiled]
        [--repeat 5] [--overhead-repeat 15] [--replay-repeat 60] [--open-gib 1.0]
        [--no-pin]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import os
import pickle
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from _common import best_time, verdict

import mnrt
from mnrt.replay.info import info

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("overhead", "serialise", "open", "replay", "size", "compiled")
# Light models (the onnx wheel's) whose capture the "compiled" section times: the three
# with most weight, and DenseNet-121 (many small ones).
COMPILED = ("light_bvlc_alexnet", "light_vgg19", "light_zfnet512", "light_densenet121")
CALLS = 10_000
MiB = 1 << 20


# --- workloads ------------------------------------------------------------------------
class InferenceLoop:
    """Per iteration: write a 16-float input, run a 2-kernel program, read blocking."""

    label = "(a) inference loop: write,program,read"

    def __init__(self, dev: mnrt.Device, rng: np.random.Generator) -> None:
        self.iters = -(-CALLS // 3)
        self.calls = 3 * self.iters
        self.q = dev.command_queue(0)
        self.x = dev.create_buffer((16,), mnrt.float32, name="x")
        h = dev.create_buffer((16,), mnrt.float32, name="h")
        self.y = dev.create_buffer((16,), mnrt.float32, name="y")
        self.prog = dev.create_program(
            [mnrt.Kernel("relu", ["x"], ["h"]), mnrt.Kernel("add", ["h", "x"], ["y"])],
            name="tiny2",
        )
        self.binding = {"x": self.x, "h": h, "y": self.y}
        # Distinct inputs, so that their blobs do not all deduplicate.
        self.inputs = list(rng.standard_normal((self.iters, 16), np.float32))

    def __call__(self) -> None:
        q, x, y, prog, binding = self.q, self.x, self.y, self.prog, self.binding
        for data in self.inputs:
            q.enqueue_write_buffer(x, data)
            q.enqueue_program(prog, binding)
            q.enqueue_read_buffer(y)
        q.finish()


class EnqueueStream:
    """10k non-blocking enqueue_program calls of a 1-element program, then finish()."""

    label = "(b) enqueue stream: 10k programs"

    def __init__(self, dev: mnrt.Device, rng: np.random.Generator) -> None:
        self.calls = CALLS
        self.q = dev.command_queue(1)
        a = dev.create_buffer((1,), mnrt.float32, name="a")
        b = dev.create_buffer((1,), mnrt.float32, name="b")
        self.prog = dev.create_program([mnrt.Kernel("relu", ["a"], ["b"])], name="tiny1")
        self.binding = {"a": a, "b": b}
        self.q.enqueue_write_buffer(a, np.ones(1, np.float32))
        self.q.finish()

    def __call__(self) -> None:
        q, prog, binding = self.q, self.prog, self.binding
        for _ in range(self.calls):
            q.enqueue_program(prog, binding)
        q.finish()


class CopyEvents:
    """Per iteration: copy 16 floats from device A to device B on A's queue, record an event
    there and have B's queue wait on it (issue 13's commands), x 3334; then finish both."""

    label = "(c) copy, record_event, wait_event"

    def __init__(self, dev: mnrt.Device, rng: np.random.Generator) -> None:
        self.iters = -(-CALLS // 3)
        self.calls = 3 * self.iters
        self.other = mnrt.open_device("auto")
        self.q0, self.q1 = dev.command_queue(2), self.other.command_queue(0)
        self.a = dev.create_buffer((16,), mnrt.float32, name="a")
        self.b = self.other.create_buffer((16,), mnrt.float32, name="b")
        self.q0.enqueue_write_buffer(self.a, rng.standard_normal(16, np.float32))
        self.q0.finish()

    def __call__(self) -> None:
        q0, q1, a, b = self.q0, self.q1, self.a, self.b
        for _ in range(self.iters):
            q0.enqueue_copy_buffer(a, b)
            q1.wait_event(q0.record_event())
        q0.finish()
        q1.finish()

    def close(self) -> None:
        self.other.close()


class GcClock:
    """Time spent in the cyclic garbage collector while active (via gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0
        self._active = False
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if not self._active:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start

    def __enter__(self) -> GcClock:
        gc.collect()  # every run starts with no collection debt from the one before
        self.seconds, self._active = 0.0, True
        return self

    def __exit__(self, *exc: object) -> None:
        self._active = False


GC = GcClock()


def timed(work) -> tuple[float, float, float]:
    """(seconds, of which in the garbage collector, process CPU seconds)."""
    with GC:
        cpu = time.process_time()
        start = time.perf_counter()
        work()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    return elapsed, GC.seconds, cpu


def timed_capture(work) -> tuple[float, float, float, float, mnrt.LightBinary]:
    """(loop seconds under capture, of which in the garbage collector, process CPU seconds
    of the loop, end_capture seconds, the binary)."""
    with GC:
        mnrt.begin_capture()
        try:
            cpu = time.process_time()
            start = time.perf_counter()
            work()
            loop_s = time.perf_counter() - start
            cpu = time.process_time() - cpu
        except BaseException:
            mnrt.end_capture()
            raise
        gc_s = GC.seconds
    with GC:
        start = time.perf_counter()
        binary = mnrt.end_capture()
        end_s = time.perf_counter() - start
    return loop_s, gc_s, cpu, end_s, binary


@contextlib.contextmanager
def one_cpu(enabled: bool) -> Iterator[None]:
    """Pin this thread, and the queue worker threads it starts, to one CPU. On a small VM a
    blocking read that wakes a thread on the other CPU costs 50-300 us, varying from run to
    run by 3x or more; on one CPU the host and worker threads (which share the GIL anyway)
    hand over without that, and the loops time reproducibly."""
    if not enabled:
        yield
        return
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {max(cpus)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)


# --- sections -------------------------------------------------------------------------
def section_overhead(dev, rng, repeat: int, results: dict) -> None:
    print(
        f"\n1. capture overhead: 10k tiny host calls, capture on vs off (fastest of {repeat}, "
        "alternating; loop + finish() timed, end_capture not)"
    )
    print(
        f"{'workload':<38} {'calls':>6} {'off ms':>7} {'on ms':>7} {'on/off':>7} {'median':>7} "
        f"{'us/call':>7} {'gc ms off/on':>12} {'cpu on/off':>10}  target (wall; cpu)"
    )
    for cls in (InferenceLoop, EnqueueStream, CopyEvents):
        work = cls(dev, rng)
        timed(work)  # warm up both paths
        timed_capture(work)
        offs, ons, ends = [], [], []
        for _ in range(repeat):
            offs.append(timed(work))
            on_s, gc_s, cpu_s, end_s, binary = timed_capture(work)
            ons.append((on_s, gc_s, cpu_s))
            ends.append(end_s)
        (off, gc_off, _), (on, gc_on, _) = min(offs), min(ons)
        ratio = on / off
        median = statistics.median(t[0] for t in ons) / statistics.median(t[0] for t in offs)
        # CPU time of the whole process (host and worker threads): unlike wall time, it
        # does not count time the VM gives to others, which swings from run to run here.
        cpu_ratio = min(t[2] for t in ons) / min(t[2] for t in offs)
        per_call_us = (on - off) / work.calls * 1e6
        print(
            f"{work.label:<38} {work.calls:>6} {off * 1e3:>7.1f} {on * 1e3:>7.1f} "
            f"{ratio:>7.3f} {median:>7.3f} {per_call_us:>7.2f} "
            f"{gc_off * 1e3:>5.1f}/{gc_on * 1e3:<6.1f} {cpu_ratio:>10.3f}  <= 1.10 "
            f"{verdict(ratio, 1.10, False)}; {verdict(cpu_ratio, 1.10, False)}"
        )
        results[cls.__name__] = (min(ends), binary)
        if hasattr(work, "close"):
            work.close()
    print(
        "   (on/off and us/call from the fastest runs; median: ratio of the medians; gc ms: time"
        " in Python's cyclic garbage collector inside the fastest runs; cpu: fastest process"
        " CPU time, host and worker threads)"
    )


def section_serialise(dev, rng, repeat: int, results: dict) -> None:
    print(f"\n2. end_capture serialisation (log -> FlatBuffer + blobs), fastest of {repeat}")
    print(
        f"{'capture':<40} {'commands':>8} {'blobs':>6} {'ms':>8} {'k cmds/s':>9} "
        f"{'bytes':>9}  target"
    )
    for cls in (InferenceLoop, EnqueueStream):
        if cls.__name__ in results:
            end_s, binary = results[cls.__name__]
        else:
            work = cls(dev, rng)
            ends = []
            for _ in range(repeat):
                *_, end_s, binary = timed_capture(work)
                ends.append(end_s)
            end_s = min(ends)
        rate = len(binary) / end_s
        print(
            f"{cls.label:<40} {len(binary):>8} {len(binary.blobs):>6} {end_s * 1e3:>8.1f} "
            f"{rate / 1e3:>9.1f} {binary.file_size:>9}  >= 200 k/s {verdict(rate, 200e3)}"
        )


def _random_int32(rng: np.random.Generator, nbytes: int) -> np.ndarray:
    """Incompressible data: random 32-bit integers (fast to generate, unlike floats)."""
    return rng.integers(-(2**31), 2**31, nbytes // 4, dtype=np.int32)


def _capture_arrays(path: Path, arrays: dict[str, np.ndarray]) -> mnrt.LightBinary:
    """Capture one blocking write per array (the device is closed before the binary is
    built, so its memory is free again), then save."""
    mnrt.begin_capture(goldens=False)
    try:
        with mnrt.open_device("auto") as d:
            q = d.command_queue(0)
            for name, arr in arrays.items():
                buf = d.create_buffer(arr.shape, mnrt.int32, name=name)
                q.enqueue_write_buffer(buf, arr, True)
    except BaseException:
        mnrt.end_capture()
        raise
    binary = mnrt.end_capture(description="bench_capture payload")
    binary.save(path)
    return binary


def section_open(rng, repeat: int, gib: float) -> None:
    big = int(gib * (1 << 30)) // 16 // 64 * 64
    cases = (  # (label, blobs, bytes each)
        ("1 MiB in 16 blobs", 16, MiB // 16),
        ("1 MiB in 4096 blobs", 4096, MiB // 4096),
        (f"{gib:g} GiB in 16 blobs", 16, big),
    )
    print("\n3. open a binary: LightBinary.load (mmap) vs pickle.load of the same arrays")
    print("   (files just written, so in the OS page cache; fastest of several loads)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_capture_") as tmp:
        for label, count, size in cases:
            start = time.perf_counter()
            arrays = {f"p{i}": _random_int32(rng, size) for i in range(count)}
            mnlb, pkl = Path(tmp) / f"{count}x{size}.mnlb", Path(tmp) / f"{count}x{size}.pkl"
            with open(pkl, "wb") as f:
                pickle.dump(arrays, f, protocol=pickle.HIGHEST_PROTOCOL)
            binary = _capture_arrays(mnlb, arrays)
            stored = sum(b.stored_size for b in binary.blobs.infos)
            del binary, arrays
            gc.collect()
            build_s = time.perf_counter() - start
            t_load = best_time(lambda mnlb=mnlb: mnrt.LightBinary.load(mnlb), 20, warmup=2)
            t_pickle = best_time(lambda pkl=pkl: _pickle_load(pkl), repeat if size < big else 3)
            # What laziness defers: reading (and hashing) every payload byte once.
            loaded = mnrt.LightBinary.load(mnlb)
            t_touch = timed(loaded.blobs.verify_all)[0]
            del loaded
            rows.append((label, stored, t_load, t_pickle, t_touch, build_s))
            mnlb.unlink()
            pkl.unlink()
    print(
        f"{'payload':<20} {'stored MiB':>10} {'load ms':>8} {'pickle ms':>10} "
        f"{'pickle/load':>11} {'+read all ms':>12}  target"
    )
    for label, stored, t_load, t_pickle, t_touch, _build in rows:
        print(
            f"{label:<20} {stored / MiB:>10.1f} {t_load * 1e3:>8.3f} {t_pickle * 1e3:>10.1f} "
            f"{_times(t_pickle / t_load):>11} {t_touch * 1e3:>12.1f}"
            f"  load <= 20 ms {verdict(t_load * 1e3, 20, False)}"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
    print(
        "   (+read all: after load, read and xxh3-check every blob once, as replay does; "
        f"building the {gib:g} GiB case took {rows[-1][-1]:.1f} s, peak RSS so far "
        f"{peak:.1f} GiB)"
    )


def _times(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.0f}x"


def _pickle_load(path: Path) -> None:
    with open(path, "rb") as f:
        pickle.load(f)


def section_replay(repeat: int) -> None:
    sys.path.insert(0, str(ROOT / "samples"))
    import mlp  # samples/mlp.py: its build(), and its data set up the same way

    batch, sizes = 64, [256, 512, 512, 10]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    params = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        params[f"w{i}"] = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(
            np.float32
        )
        params[f"b{i}"] = (0.1 * rng.standard_normal(fan_out)).astype(np.float32)

    # Live runs time from open_device to the output read back; closing is not timed, as
    # replay's wall time does not include it either.
    def live_mlp() -> float:
        start = time.perf_counter()
        with mnrt.open_device("auto") as dev:
            bufs, prog = mlp.build(dev, batch, sizes)
            q = dev.command_queue(0)
            q.enqueue_write_buffer(bufs["x"], x)
            for name, value in params.items():
                q.enqueue_write_buffer(bufs[name], value)
            q.enqueue_program(prog, {slot: bufs[slot] for slot in prog.slots})
            q.enqueue_read_buffer(bufs["y"], blocking=True)
            return time.perf_counter() - start

    loop_rng = np.random.default_rng(1)

    def live_loop() -> float:
        start = time.perf_counter()
        with mnrt.open_device("auto") as dev:
            InferenceLoop(dev, loop_rng)()
            return time.perf_counter() - start

    print(
        "\n4. replay vs live: alternating, fastest (median) of the runs; the target is for the MLP"
    )
    print(f"{'workload, figure':<46} {'live ms':>15} {'replay ms':>15} {'ratio':>14}  target")
    passed = True
    for label, live, runs, target in (
        (
            f"samples/mlp.py (MLP {'-'.join(map(str, sizes))}, batch {batch})",
            live_mlp,
            repeat,
            1.0,
        ),
        ("inference loop (a) of section 1", live_loop, max(3, repeat // 6), None),
    ):
        with tempfile.TemporaryDirectory(prefix="bench_capture_") as tmp:
            path = Path(tmp) / "capture.mnlb"
            with mnrt.capture(path):
                live()
            binary = mnrt.LightBinary.load(path)
            live()
            mnrt.replay(binary)
            t_live, t_replay, t_full = [], [], []
            for _ in range(runs):
                t_live.append(live())
                report = mnrt.replay(binary)
                t_replay.append(report.timings["wall_s"])
                passed &= report.passed
                start = time.perf_counter()
                report = mnrt.replay(path)
                t_full.append(time.perf_counter() - start)
                passed &= report.passed
        print(f"{label}: {len(binary)} commands, {runs} runs")
        for name, times, goal in (
            ("  replay wall (one loop) / live", t_replay, target),
            ("  replay(path) end to end / live", t_full, None),
        ):
            lo, mid = min(times) / min(t_live), statistics.median(times) / statistics.median(t_live)
            verdict_text = f"<= {goal} {verdict(lo, goal, False)}" if goal else "(reported)"
            print(
                f"{name:<46} {_fast_med(t_live)} {_fast_med(times)} {lo:>6.3f} ({mid:.3f})  "
                f"{verdict_text}"
            )
    print(
        "   (replay wall: report.timings['wall_s'], one loop; end to end adds load, validation"
        " and blob checks, golden checks and closing the device)"
    )
    print(f"   goldens {'passed' if passed else 'FAILED'} on every replay")


def _fast_med(times: list[float]) -> str:
    return f"{min(times) * 1e3:>6.1f} ({statistics.median(times) * 1e3:6.1f})"


def section_size(rng) -> None:
    print("\n5. size")
    data = rng.standard_normal(MiB, np.float32)  # 4 MiB
    mnrt.begin_capture()
    try:
        with mnrt.open_device("auto") as d:
            q = d.command_queue(0)
            buf = d.create_buffer(data.shape, mnrt.float32, name="w")
            for _ in range(100):
                q.enqueue_write_buffer(buf, data)
            q.finish()
    except BaseException:
        mnrt.end_capture()
        raise
    stats = info(mnrt.end_capture())
    print(
        f"100 writes of one 4 MiB array: {stats['blobs']} blob(s), payload referenced "
        f"{stats['payload_bytes_referenced'] / MiB:.1f} MiB, unique "
        f"{stats['payload_bytes_unique'] / MiB:.2f} MiB, stored "
        f"{stats['payload_bytes_stored'] / MiB:.2f} MiB, file {stats['file_bytes'] / MiB:.2f} MiB"
        f"  file <= 5 MiB {verdict(stats['file_bytes'], 5 * MiB, False)}"
    )
    stats = info(mnrt.LightBinary.load(ROOT / "samples" / "mlp.mnlb"))
    print(
        f"samples/mlp.mnlb: {stats['payload_bytes_unique']} unique payload bytes stored in "
        f"{stats['payload_bytes_stored']} (zstd ratio {stats['compression_ratio']:.2f}), "
        f"file {stats['file_bytes']} bytes"
    )


def section_compiled(repeat: int) -> None:
    """A capture of one call of a compiled light model, at O3 (begin_capture, the call,
    end_capture): its weights recorded from the arrays they were uploaded from (as it is
    made) against copied out of device memory (as before, the baseline: the function then
    vouches for none), alternating rounds; wall time and minor page faults a capture."""
    print("\n6. capture of a compiled call: weights vouched for vs copied from the device")
    try:
        import onnx
    except ImportError:
        print("  (skipped: needs onnx, `pip install onnx`, for the light models)")
        return
    from bench_goldens import example_inputs, light_models

    from mnrt.compiler.compiled import CompiledFunction

    print(
        f"  {'model':<20} {'copied':>10} {'vouched':>10} {'ratio':>6} {'faults copied/vouched':>22}"
    )
    vouched = CompiledFunction._weights_as_stored
    ctx = mnrt.Context()
    for path in (p for p in light_models() if Path(p).stem in COMPILED):
        model = onnx.load(path)
        inputs = example_inputs(model)
        f = ctx.compile(model, inputs, options={"float_dtype": "float", "option_json": "O3"})
        times: dict[bool, list[float]] = {False: [], True: []}
        faults: dict[bool, list[int]] = {False: [], True: []}
        try:
            for _ in range(repeat + 1):  # the first round warms up and is not kept
                for vouch in (False, True):
                    CompiledFunction._weights_as_stored = vouched if vouch else lambda self: {}
                    gc.collect()
                    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                    start = time.perf_counter()
                    mnrt.begin_capture()
                    f(inputs)
                    mnrt.end_capture()
                    times[vouch].append(time.perf_counter() - start)
                    faults[vouch].append(
                        resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
                    )
        finally:
            CompiledFunction._weights_as_stored = vouched
            f.close()
        copied, kept = min(times[False][1:]), min(times[True][1:])
        print(
            f"  {Path(path).stem:<20} {copied * 1e3:>8.0f}ms {kept * 1e3:>8.0f}ms "
            f"{kept / copied:>5.2f}x {statistics.median(faults[False][1:]):>11,.0f} / "
            f"{statistics.median(faults[True][1:]):,.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--overhead-repeat", type=int, default=15)
    parser.add_argument("--replay-repeat", type=int, default=60)
    parser.add_argument("--open-gib", type=float, default=1.0, help="payload of the big binary")
    parser.add_argument("--no-pin", action="store_true", help="do not pin to one CPU (noisier)")
    args = parser.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    rng = np.random.default_rng(0)
    results: dict = {}
    start = time.perf_counter()
    pinned = set(only) - {"compiled"}
    pin = bool(pinned) and not args.no_pin and hasattr(os, "sched_setaffinity")
    if pin:
        print(
            "(pinned to one CPU, queue worker threads included; --no-pin for the noisier default)"
        )
    with one_cpu(pin):
        if "overhead" in only or "serialise" in only:
            with mnrt.open_device("auto") as dev:
                if "overhead" in only:
                    section_overhead(dev, rng, args.overhead_repeat, results)
                if "serialise" in only:
                    section_serialise(dev, rng, args.repeat, results)
            results.clear()
        if "open" in only:
            section_open(rng, args.repeat, args.open_gib)
        if "replay" in only:
            section_replay(args.replay_repeat)
        if "size" in only:
            section_size(rng)
    if "compiled" in only:  # not pinned: the models' products use both cores
        section_compiled(args.repeat)
    print(f"\n(total {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
