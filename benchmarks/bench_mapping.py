"""Mappings that matter (issue 14): presets, the mapping-aware model and the Pareto mapper.

Figures:
  encoder block (BERT-base shape), CNN (batch 32; the bundled batch 2 too) and ResNet-50
    at float_dtype=mixed: modelled device time per preset,
    O3 / O0 (target <= 0.67), monotone O0 -> O4; results identical across presets at float
  a 4096^3 half GEMM's modelled throughput / the 393.2 TFLOPS half peak (target >= 0.90)
  ResNet-50 at O3: every matrix layer's modelled utilisation and its roofline bound (a
    conv in a chain with its prologue or epilogue as "conv2d+");
    it, the encoder block and the CNN at batch 32: modelled time under a shrinking
    sram_budget (chains included, priced by the scheduler with the room placement leaves
    them), monotone
  mapper against brute force on 50 random small GEMMs and 20 convs: same optimum on every
    one, evaluated mappings brute / mapper (target >= 10x)
  compile time: CNN at O1 (target <= 2 s) and O4 (<= 60 s), ResNet-50 at O3 (<= 30 s)
  with --light-models: every light model of the onnx wheel, per preset as above (modelled
    time, O3 / O0, monotone, identical at float) and under a shrinking sram_budget,
    instead of the figures above

    python benchmarks/bench_mapping.py [--skip-resnet | --light-models]
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from _common import verdict
from bench_compile_time import light_model

import mnrt
from mnrt.compiler import Metrics, map_kernel
from mnrt.compiler.mapper import brute_force
from mnrt.compiler.models import MODELS
from mnrt.device.dtypes import HALF
from mnrt.device.kernels import chain
from mnrt.device.kernels.registry import TensorSpec
from mnrt.device.mapping import PROBLEMS
from mnrt.device.spec import MNCORE2

PRESETS = ("O0", "O1", "O2", "O3", "O4")
LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512")  # fmt: skip


def compile_model(ctx, model, inputs, preset, dtype):
    start = time.perf_counter()
    compiled = ctx.compile(model, inputs, options={"option_json": preset, "float_dtype": dtype})
    seconds = time.perf_counter() - start
    plan = compiled.lowered.program.plan(compiled.lowered.bindings)
    return compiled, plan, seconds


def presets(ctx, name, model, inputs) -> dict:
    times, seconds = {}, {}
    for p in PRESETS:
        _, plan, s = compile_model(ctx, model, inputs, p, "mixed")
        times[p], seconds[p] = plan.modelled.time_s, s
    outs = []
    for p in PRESETS:
        compiled, _, _ = compile_model(ctx, model, inputs, p, "float")
        outs.append({k: np.asarray(v.cpu()) for k, v in compiled(inputs).items()})
    same = all(np.array_equal(o[k], outs[0][k]) for o in outs[1:] for k in outs[0])
    row = "  ".join(f"{p} {times[p] * 1e6:8.1f} us" for p in PRESETS)
    monotone = all(times[a] >= times[b] for a, b in itertools.pairwise(PRESETS))
    ratio = times["O3"] / times["O0"]
    print(f"{name:18s} {row}")
    print(f"{'':18s} O3/O0 {ratio:.3f} {verdict(ratio, 0.67, higher_is_better=False)}; "
          f"monotone {'yes' if monotone else 'NO'}; identical at float across presets: "
          f"{'yes' if same else 'NO'}; compile s: "
          + " ".join(f"{p} {seconds[p]:.2f}" for p in PRESETS))  # fmt: skip
    return seconds


def budgets(ctx, name, model, inputs) -> None:
    """O3 at float_dtype=mixed under shrinking sram_budget: modelled time and energy, and
    the chains' share (their intermediates take only what placement leaves on chip)."""
    rows, times = [], []
    for budget in (0, 16 << 20, 1 << 20, 64 << 10):
        options = {"option_json": "O3", "float_dtype": "mixed", "sram_budget": budget}
        compiled = ctx.compile(model, inputs, options=options)
        plan = compiled.lowered.program.plan(compiled.lowered.bindings)
        chains = [s.modelled for s in plan.steps if s.kdef.name == "chain"]
        times.append(plan.modelled.time_s)
        rows.append(
            f"{budget >> 10 if budget else 'all':>6}{' KiB' if budget else '    '} "
            f"{plan.modelled.time_s * 1e6:8.1f} us {plan.modelled.energy_j * 1e3:7.2f} mJ; "
            f"{len(chains)} chains {sum(m.time_s for m in chains) * 1e6:6.1f} us, "
            f"{sum(m.dram_bytes for m in chains) / 1e6:6.2f} MB DRAM"
        )
    monotone = all(a <= b for a, b in itertools.pairwise(times))
    print(f"{name} at O3 by sram_budget (monotone: {monotone})")
    for row in rows:
        print(f"  {row}")


def big_gemm() -> None:
    n = 4096
    kernel = mnrt.Kernel("gemm", ["a", "b"], ["y"])
    ops = {s: TensorSpec((n, n), HALF) for s in ("a", "b", "y")}
    best = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops).best
    util = 2.0 * n**3 / best.time_s / MNCORE2.peak_flops("half")
    tflops = 2.0 * n**3 / best.time_s / 1e12
    print(f"4096^3 half GEMM: {best.mapping}: {best.time_s * 1e6:.1f} us, "
          f"{tflops:.1f} TFLOPS = {util:.3f} of peak {verdict(util, 0.9)}")  # fmt: skip


def resnet_table(ctx, model, inputs) -> None:
    compiled, plan, _ = compile_model(ctx, model, inputs, "O3", "mixed")
    spec = MNCORE2
    print(
        f"{'layer':32s} {'op':7s} {'GFLOP':>8s} {'us':>9s} {'util':>6s} {'roofline':>8s}  mapping"
    )
    for node, step in zip(compiled.graph.nodes, plan.steps):
        if not node.attrs.get("mapping"):
            continue  # a matrix layer is a gemm, a conv2d, or a chain holding one ("conv2d+")
        m = step.modelled
        ins = [compiled.graph.values[i] for i in node.inputs]
        outs = [compiled.graph.values[o] for o in node.outputs]
        op, prec = node.op, ins[0].dtype.precision
        if op not in PROBLEMS:  # a chain: the matrix kernel's precision, after a prologue
            specs = [TensorSpec(tuple(v.shape), v.dtype) for v in ins]
            matrix = chain.plan(node.attrs, specs)[chain.matrix_step(node.attrs)]
            op, prec = f"{matrix.op}+", matrix.ins[0].dtype.precision
        peak = spec.peak_flops(prec)
        # Roofline of this placement: each operand not kept on chip crosses DRAM once.
        moved = sum(int(np.prod(v.shape)) * v.dtype.itemsize for v in ins + outs
                    if v.location != "lm")  # fmt: skip
        roof = max(m.flops / peak, moved / spec.dram_bandwidth) + spec.kernel_launch_s
        print(f"{node.name[:32]:32s} {op:7s} {m.flops / 1e9:8.3f} {m.time_s * 1e6:9.2f} "
              f"{m.flops / m.time_s / peak:6.3f} {m.flops / roof / peak:8.3f}  "
              f"{node.attrs['mapping']}")  # fmt: skip


def mapper_vs_brute(seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(50):
        m, n, k = (int(v) for v in rng.integers(1, 257, 3))
        kernel = mnrt.Kernel("gemm", ["a", "b"], ["y"])
        cases.append((kernel, {"a": TensorSpec((m, k), HALF), "b": TensorSpec((k, n), HALF),
                               "y": TensorSpec((m, n), HALF)}))  # fmt: skip
    for _ in range(20):
        b, c, hw = (
            int(rng.integers(1, 5)),
            int(rng.choice([3, 16, 32, 64])),
            int(rng.integers(7, 33)),
        )
        o, kk = int(rng.choice([16, 32, 64, 128])), int(rng.choice([1, 3, 5]))
        kernel = mnrt.Kernel("conv2d", ["x", "w"], ["y"])
        out = hw - kk + 1
        cases.append((kernel, {"x": TensorSpec((b, c, hw, hw), HALF),
                               "w": TensorSpec((o, c, kk, kk), HALF),
                               "y": TensorSpec((b, o, out, out), HALF)}))  # fmt: skip
    same, mapped, brute = 0, 0, 0
    start = time.perf_counter()
    for kernel, ops in cases:
        front = map_kernel(kernel, metrics=Metrics.LATENCY, operands=ops)
        best, count = brute_force(kernel, operands=ops)
        same += front.best.time_s == best
        mapped += front.evaluated
        brute += count
    ratio = brute / mapped
    print(
        f"mapper vs brute force on 50 GEMMs + 20 convs: same optimum {same}/{len(cases)}; "
        f"evaluated {brute} / {mapped} = {ratio:.0f}x fewer {verdict(ratio, 10)} "
        f"({time.perf_counter() - start:.0f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-resnet", action="store_true")
    parser.add_argument("--light-models", action="store_true")
    args = parser.parse_args()
    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    if args.light_models:
        ctx.close()
        for name in LIGHT_MODELS:
            model, x = light_model(name)
            # a Context of its own per model: its compiled functions' device memory goes
            # with it (the nine models together outgrew a 23 GiB machine)
            with mnrt.Context(mnrt.MNDevice("mncore2:auto")) as one:
                presets(one, name, model, x)
                budgets(one, name, model, x)
        return
    big_gemm()
    encoder, x = MODELS["transformer"](seq=128, dim=768, heads=12)
    presets(ctx, "encoder block", encoder, x)
    budgets(ctx, "encoder block", encoder, x)
    # The bundled CNN (batch 2 of 32x32 images) is launch-bound: 16 kernels of ~2 us each
    # whatever their mapping; on a batch of 32 its convolutions are what takes the time.
    cnn, x = MODELS["cnn"]()
    presets(ctx, "cnn b2", cnn, x)
    cnn, x = MODELS["cnn"](batch=32)
    secs = presets(ctx, "cnn b32", cnn, x)
    budgets(ctx, "cnn b32", cnn, x)
    print(f"cnn compile O1 {secs['O1']:.2f} s {verdict(secs['O1'], 2.0, higher_is_better=False)}, "
          f"O4 {secs['O4']:.2f} s {verdict(secs['O4'], 60.0, higher_is_better=False)}")  # fmt: skip
    if not args.skip_resnet:
        resnet, x = light_model("resnet50")
        secs = presets(ctx, "resnet-50", resnet, x)
        print(f"resnet-50 compile O3 {secs['O3']:.2f} s "
              f"{verdict(secs['O3'], 30.0, higher_is_better=False)}")  # fmt: skip
        resnet_table(ctx, resnet, x)
        budgets(ctx, "resnet-50", resnet, x)
    mapper_vs_brute()


if __name__ == "__main__":
    main()
