"""Looking inside binaries (issue 15): the figures its closing note must show.

locate:   every light model the onnx wheel ships (onnx/backend/test/data/light), compiled
          at float and saved with save_binary (fingerprints on by default); for three of
          its weights (first, middle, last of those one kernel reads), the binary with that
          weight perturbed (x1.25 + 0.125, tests/binaries.perturbed): does `--locate` name
          exactly the kernel that reads it? (target: every one)
overhead: capture of the compiled model's run with fingerprints against without, in one
          run, alternating rounds, fastest of each and median of each (target: <= 1.05x);
          the floor under it, a capture that hashes every output and takes no statistics
          (the hash is the one pass over every output a fingerprint needs); fingerprints
          over format 1.2's larger sample (64 runs of 256, "1.2smp"); as context,
          the whole `save_binary` (the capture a compiled binary is made by: run, goldens,
          reference check, file) with fingerprints against without; the CPU time the
          fingerprints take on the thread running the queue (the capture waits for it),
          as a share of the process's CPU time and of the fastest capture's wall time
          (steadier than the ratio of two wall times on a shared machine), and the same
          share for the hashes alone ("floor": what no faster statistics can remove); with
          --overhead-only, these figures alone (no locate, reduce, diff or optimize)
reduce:   a 200-kernel binary with one weight perturbed, and one whose gather gets an
          index out of range, reduced by `mnrt reduce` (target: <= 3 kernels, <= 60 s)
diff:     `mnrt diff` of two VGG-19 binaries (a second capture of the same model, and one
          with a weight perturbed), in process and as a whole `mnrt diff` process
          (target: <= 1 s)
pipelined: with --devices N instead: each light model compiled over N devices (gpipe, two
          microbatches); its binary replayed with rtol = atol = 0 and --locate ("exact": no
          kernel differs from its fingerprint), three weights perturbed and located, the
          middle one reduced
optimize: `mnrt optimize` of the VGG-19 binary: bytes before and after, the result's
          replay (target: smaller and passing)

  pip install onnx onnxruntime   # for this benchmark only
  nice -n 10 python benchmarks/bench_tools.py [--model light_squeezenet ...] [--rounds 5]
                                              [--overhead-only] [--preset O3] [--devices 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx
from bench_goldens import example_inputs, light_models
from binaries import chain_capture, perturbed, weight_sites, with_written

import mnrt
from mnrt.capture import fingerprinter
from mnrt.compiler import compiled as compiled_module
from mnrt.format.fb.LightBinary import LightBinaryT
from mnrt.format.fingerprints import Sample, Stats, hash_of
from mnrt.host.commands import KernelWatch
from mnrt.replay.diff import diff
from mnrt.replay.optimize import optimize
from mnrt.replay.reduce import kernel_count, reduce

# What format 1.2 captures summarised (the schema's defaults: 1.2 did not record a sample).
FORMAT_1_2_SAMPLE = Sample(LightBinaryT().fingerprintRuns, LightBinaryT().fingerprintRun)


def locate_figures(
    ctx: mnrt.Context, path: str, folder: Path, rounds: int, locate: bool = True, preset: str = "O1"
) -> dict:
    """Compile at `preset`, save, perturb three weights and locate each (unless not
    `locate`); time captures with and without fingerprints."""
    name = Path(path).stem
    model = onnx.load(path)
    inputs = example_inputs(model)
    compiled = ctx.compile(model, inputs, options={"float_dtype": "float", "option_json": preset})
    out = folder / f"{name}.mnlb"
    compiled.save_binary(out)
    binary = mnrt.LightBinary.load(out)
    sites = weight_sites(binary)
    picked = [sites[0], sites[len(sites) // 2], sites[-1]] if sites and locate else []
    named = 0
    for command, kernel, gid in picked:
        located = mnrt.replay(perturbed(binary, gid), locate=True).locate.located
        named += located is not None and (located.command, located.kernel) == (command, kernel)
    wall, cpu = overhead(compiled, inputs, rounds)
    saved = save_overhead(compiled, folder / f"{name}_timed.mnlb", rounds)
    return {
        "model": name,
        "kernels": len(binary.fingerprints),
        "named": f"{named}/{len(picked)}" if locate else "-",
        "capture_s": min(wall["none"]),
        "with_prints_s": min(wall["prints"]),
        "median_ratio": float(np.median(wall["prints"]) / np.median(wall["none"])),
        "hash_ratio": min(wall["hash"]) / min(wall["none"]),
        "sample_1_2_ratio": min(wall["prints_1_2"]) / min(wall["none"]),
        "cpu_s": min(cpu["none"]),
        "with_prints_cpu_s": min(cpu["prints"]),
        "queue_s": min(cpu["queue"]),
        "queue_hash_s": min(cpu["queue_hash"]),
        "save_s": min(saved[False]),
        "save_with_prints_s": min(saved[True]),
        "path": out,
    }


def pipelined_figures(
    ctx: mnrt.Context, path: str, folder: Path, devices: int, preset: str = "O1"
) -> dict:
    """Compile over `devices` devices (gpipe, two microbatches) at `preset` and save; replay
    the binary as it is with rtol = atol = 0 and --locate (its capture and every replay give
    BLAS the same share of the cores, so nothing may differ); perturb three weights and
    locate each; reduce the middle one."""
    name = Path(path).stem
    model = onnx.load(path)
    options = {"float_dtype": "float", "option_json": preset,
               "mpmd": {"devices": list(range(devices)), "microbatches": 2}}  # fmt: skip
    compiled = ctx.compile(model, example_inputs(model), options=options)
    out = folder / f"{name}_pipelined.mnlb"
    compiled.save_binary(out)
    compiled.close()
    binary = mnrt.LightBinary.load(out)
    clean = mnrt.replay(binary, rtol=0.0, atol=0.0, locate=True)
    sites = weight_sites(binary)
    picked = [sites[0], sites[len(sites) // 2], sites[-1]]
    named = 0
    for command, kernel, gid in picked:
        located = mnrt.replay(perturbed(binary, gid), locate=True).locate.located
        named += located is not None and (located.command, located.kernel) == (command, kernel)
    start = time.perf_counter()
    reduced = reduce(perturbed(binary, picked[1][2]))
    return {
        "model": name,
        "kernels": clean.locate.compared,
        "exact": clean.passed and clean.locate.divergent == 0,
        "named": f"{named}/{len(picked)}",
        "reduced": (kernel_count(binary), kernel_count(reduced.binary)),
        "reduce_s": time.perf_counter() - start,
    }


class HashOnly(KernelWatch):
    """The floor under fingerprints: every kernel output hashed as a capture's fingerprints
    hash it, with no statistics (NaN in their place)."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.stats: list[Stats] = []

    def after(self, step, results) -> None:
        nan = float("nan")
        # the bound kernel's outputs are the storage views the fingerprinter hashes
        outs = step.bound.outs
        self.stats += [Stats(hash_of(bits), nan, nan, nan, 0) for bits, _ in outs]
        self.counts.append(len(outs))


def overhead(compiled, inputs: dict, rounds: int) -> tuple[dict, dict]:
    """Capture times (wall and this process's CPU time, which a loaded machine disturbs
    less) without fingerprints ("none"), with the hashes alone ("hash", see HashOnly), with
    fingerprints ("prints") and with fingerprints over the larger sample format 1.2 took
    ("prints_1_2"), in alternating blocks of three captures of each kind, the first of a
    block not counted: a capture runs measurably slower after one of another
    kind (what its predecessor left to the allocator differs). Then, in captures of their
    own (timing every kernel's watch costs a few microseconds),
    `cpu["queue"]`: the CPU time fingerprinting takes on the thread running the queue (see
    capture/fingerprinter.py), and `cpu["queue_hash"]` what the hashes alone take there."""
    kinds = ("none", "hash", "prints", "prints_1_2")
    wall, cpu = {k: [] for k in kinds}, {**{k: [] for k in kinds}, "queue": []}
    real, sample = fingerprinter.Fingerprinter, fingerprinter.SAMPLE
    try:
        for _ in range(rounds):
            for kind in kinds:
                # the capture makes its queue's watches with the module's Fingerprinter,
                # which samples the module's SAMPLE
                fingerprinter.Fingerprinter = HashOnly if kind == "hash" else real
                fingerprinter.SAMPLE = FORMAT_1_2_SAMPLE if kind == "prints_1_2" else sample
                for i in range(3):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    mnrt.begin_capture(fingerprints=kind != "none")
                    compiled(inputs)
                    mnrt.end_capture()
                    if i:
                        wall[kind].append(time.perf_counter() - start)
                        cpu[kind].append(time.process_time() - start_cpu)
    finally:
        fingerprinter.Fingerprinter, fingerprinter.SAMPLE = real, sample
    for key, watch in (("queue", real), ("queue_hash", HashOnly)):
        cpu[key] = watch_cpu(watch, compiled, inputs, rounds)
    return wall, cpu


def watch_cpu(watch: type, compiled, inputs: dict, rounds: int) -> list[float]:
    """The CPU time a capture's kernel watches of class `watch` take on the thread running
    the queue, a figure per capture (with fingerprints, made by `watch`). Each call is
    timed with time.thread_time, a system call of about a microsecond, part of which falls
    inside the interval it measures: what the timing adds to a call that does nothing is
    measured first and taken off every call's figure (a profiler's calibration)."""
    real = fingerprinter.Fingerprinter
    spent, calls = [0.0], [0]
    saved = [
        (name, watch.__dict__[name])
        for name in ("before", "after", "done")
        if name in watch.__dict__
    ]

    def timed(function):
        def run(*args):
            start = time.thread_time()
            try:
                return function(*args)
            finally:
                spent[0] += time.thread_time() - start
                calls[0] += 1

        return run

    nothing = timed(lambda *args: None)
    for _ in range(20000):
        nothing(None, None)
    bias = spent[0] / calls[0]

    for name, function in saved:
        setattr(watch, name, timed(function))
    fingerprinter.Fingerprinter = watch
    seconds = []
    try:
        for _ in range(rounds):
            spent[0], calls[0] = 0.0, 0
            mnrt.begin_capture(fingerprints=True)
            compiled(inputs)
            mnrt.end_capture()
            seconds.append(spent[0] - calls[0] * bias)
    finally:
        fingerprinter.Fingerprinter = real
        for name, function in saved:
            setattr(watch, name, function)
    return seconds


def save_overhead(compiled, path: Path, rounds: int) -> dict[bool, list[float]]:
    """`save_binary` wall times with fingerprints (as compiled binaries are made) and with
    them turned off, in alternating blocks of three saves of each kind, the first of a
    block not counted (as `overhead` times captures: a save after one of the other kind
    runs slower, and alternating single saves measured 1.07-1.09x where blocks measured
    0.98-1.06x on the same models)."""
    real = compiled_module.capture_if_idle

    def without(*args, **kwargs):
        return real(*args, **{**kwargs, "fingerprints": False})

    wall: dict[bool, list[float]] = {False: [], True: []}
    try:
        for _ in range(rounds):
            for prints in (False, True):
                compiled_module.capture_if_idle = real if prints else without
                for i in range(3):
                    start = time.perf_counter()
                    compiled.save_binary(path)
                    if i:
                        wall[prints].append(time.perf_counter() - start)
    finally:
        compiled_module.capture_if_idle = real
    return wall


def reduce_figures() -> list[tuple[str, int, int, float, str]]:
    binary = chain_capture(200)
    gid = next(s for s in weight_sites(binary) if s[1] == 137)[2]
    cases = [("one weight perturbed (kernel 137)", perturbed(binary, gid))]
    gathered = chain_capture(200, gather_at=150)
    bad = with_written(gathered, "idx", np.array([3, 2, 9, 0], np.int32))
    cases.append(("gather index out of range (kernel 150)", bad))
    rows = []
    for what, failing in cases:
        start = time.perf_counter()
        result = reduce(failing)
        seconds = time.perf_counter() - start
        steps = ", ".join(
            f"{s['step']} {s['kernels'][0]}->{s['kernels'][1]} ({s['tests']} replays)"
            for s in result.steps
        )
        rows.append((what, kernel_count(failing), kernel_count(result.binary), seconds, steps))
    return rows


def _process_s(*args: str) -> tuple[float, int]:
    start = time.perf_counter()
    code = subprocess.run([sys.executable, "-m", "mnrt", *args], capture_output=True).returncode
    return time.perf_counter() - start, code


def diff_figures(ctx: mnrt.Context, vgg: Path, folder: Path, preset: str) -> list[tuple]:
    """(pair, in-process seconds, whole `mnrt diff` process seconds, exit code, `mnrt
    --version` process seconds: the start-up every mnrt command pays), fastest of three;
    the second capture compiled at `preset`, as the first was."""
    model = onnx.load(str(Path(onnx.__file__).parent / "backend/test/data/light/light_vgg19.onnx"))
    inputs = example_inputs(model)
    again = folder / "vgg19_again.mnlb"
    options = {"float_dtype": "float", "option_json": preset}
    ctx.compile(model, inputs, options=options).save_binary(again)
    binary = mnrt.LightBinary.load(vgg)
    edited = folder / "vgg19_perturbed.mnlb"
    perturbed(binary, weight_sites(binary)[5][2]).save(edited)
    rows = []
    for what, other in (("recaptured", again), ("one weight perturbed", edited)):
        inside, whole, startup = [], [], []
        for _ in range(3):
            start = time.perf_counter()
            diff(mnrt.LightBinary.load(vgg), mnrt.LightBinary.load(other))
            inside.append(time.perf_counter() - start)
            seconds, code = _process_s("diff", str(vgg), str(other))
            whole.append(seconds)
            startup.append(_process_s("--version")[0])
        rows.append((what, min(inside), min(whole), code, min(startup)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="light model name(s); default: all")
    parser.add_argument("--rounds", type=int, default=5, help="capture rounds per side")
    parser.add_argument(
        "--overhead-only",
        action="store_true",
        help="only the fingerprint overhead at capture (no locate, reduce, diff or optimize)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        help="instead: pipelined compiles over this many devices (bit-exact replay, locate, "
        "reduce)",
    )
    parser.add_argument(
        "--preset",
        default="O1",
        help="compile preset of the light models (default: O1, the compiler's default)",
    )
    args = parser.parse_args()
    paths = light_models()
    if args.model:
        paths = [p for p in paths if Path(p).stem in args.model]
    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.devices:
            print(
                f"pipelined (light models, float, {args.preset}, {args.devices} devices, gpipe x 2)"
            )
            print(f"  {'model':<22} {'kernels':>7} {'rtol=0':>7} {'named':>6} {'reduce':>18}")
            for path in paths:
                r = pipelined_figures(ctx, path, folder, args.devices, args.preset)
                before, after = r["reduced"]
                exact = "exact" if r["exact"] else "DIFFER"
                print(
                    f"  {r['model']:<22} {r['kernels']:>7} {exact:>7} {r['named']:>6} "
                    f"{before:>4} -> {after} in {r['reduce_s']:5.2f} s"
                )
            return
        print(
            f"{'fingerprint overhead' if args.overhead_only else 'locate and fingerprint overhead'}"
            f" (light models, float, {args.preset}; capture: fastest of {args.rounds} alternating"
            " rounds)"
        )
        print(
            f"  {'model':<22} {'kernels':>7} {'named':>6} {'capture':>10} {'+prints':>10} "
            f"{'wall':>6} {'median':>6} {'hash':>6} {'1.2smp':>6} {'cpu':>6} "
            f"{'queue/cpu/wall':>22} {'floor':>6} "
            f"{'save_binary':>18}"
        )
        vgg = None
        for path in paths:
            r = locate_figures(
                ctx, path, folder, args.rounds, locate=not args.overhead_only, preset=args.preset
            )
            vgg = r["path"] if r["model"] == "light_vgg19" else vgg
            print(
                f"  {r['model']:<22} {r['kernels']:>7} {r['named']:>6} "
                f"{r['capture_s'] * 1e3:>8.1f}ms {r['with_prints_s'] * 1e3:>8.1f}ms "
                f"{r['with_prints_s'] / r['capture_s']:>5.3f}x {r['median_ratio']:>5.3f}x "
                f"{r['hash_ratio']:>5.3f}x {r['sample_1_2_ratio']:>5.3f}x "
                f"{r['with_prints_cpu_s'] / r['cpu_s']:>5.3f}x "
                f"{r['queue_s'] * 1e3:>6.1f}ms {r['queue_s'] / r['cpu_s']:>6.1%} "
                f"{r['queue_s'] / r['capture_s']:>6.1%} "
                f"{r['queue_hash_s'] / r['capture_s']:>6.1%} "
                f"{r['save_s'] * 1e3:>8.0f}ms {r['save_with_prints_s'] / r['save_s']:>6.3f}x"
            )
        if args.overhead_only:
            return
        print("reduce (mnrt reduce, 200-kernel binaries)")
        for what, before, after, seconds, steps in reduce_figures():
            print(f"  {what}: {before} -> {after} kernels in {seconds:.2f} s [{steps}]")
        if vgg is not None:
            print("diff (two VGG-19 binaries)")
            for what, inside, whole, code, startup in diff_figures(ctx, vgg, folder, args.preset):
                print(
                    f"  {what}: {inside * 1e3:.1f} ms in process; {whole * 1e3:.0f} ms as a "
                    f"`mnrt diff` process (exit {code}); `mnrt --version` alone: "
                    f"{startup * 1e3:.0f} ms"
                )
            binary = mnrt.LightBinary.load(vgg)
            start = time.perf_counter()
            small, stats = optimize(binary)
            seconds = time.perf_counter() - start
            passed = mnrt.replay(small).passed
            print(
                f"optimize VGG-19: {stats.bytes[0]} -> {stats.bytes[1]} bytes "
                f"({stats.bytes[1] / stats.bytes[0]:.3f}x), {stats.commands[0]} -> "
                f"{stats.commands[1]} commands, replay {'PASS' if passed else 'FAIL'}, "
                f"{seconds:.1f} s"
            )


if __name__ == "__main__":
    main()
