"""MPMD pipelines on the modelled timeline: throughput against one device, bubble fraction
against the analytic figure.

For an 8-layer encoder stack (64 x 128, 4 heads) and a 16-layer MLP (64 x 256), each a
4-device, 8-microbatch pipeline, GPipe (4 stages) and circular (8 stages: 2 virtual
stages per device), with stages balanced by modelled cost and by a stage_assignment of
whole layers:
  throughput = makespan of the same 8 microbatches compiled for one device (mpmd with
    devices [0]: the same writes, programs and reads on one timeline) / the pipeline's
    makespan (mnrt.host.timeline.schedule of the run's commands; Timeline.makespan_s);
  bubble = Timeline.bubble_fraction (idle share of devices x makespan) against the
    analytic figure with equal stages and free transfers: GPipe (p-1)/(m+p-1) = 3/11,
    circular with v virtual stages per device (p-1)/(v m + p-1) = 3/19;
  copies = the share of devices x makespan the copies take on their own queues (overlapped
    with compute, but each stage boundary adds one to the fill);
  bubble free = the bubble of the same run with every copy free: what the stages' own
    imbalance (max/mean stage time, "imbal") leaves;
  max |pipelined - one device| over every output element of the 8 microbatches.

    python benchmarks/bench_pipeline.py
"""

from __future__ import annotations

import dataclasses

import numpy as np

import mnrt
from mnrt.compiler.models import deep_mlp, encoder_stack
from mnrt.compiler.mpmd import analytic_bubble
from mnrt.host.timeline import schedule as place

DEVICES, MICROBATCHES = 4, 8
MODELS = {
    "encoder x8": (encoder_stack, {}, 8),
    "MLP x16": (deep_mlp, {}, 16),
}


def _layers(layers: int, stages: int) -> dict[str, int]:
    """Whole layers per stage, in order."""
    return {f"layer{i}/": i * stages // layers for i in range(layers)}


def run() -> None:
    rng = np.random.default_rng(0)
    print(
        f"{DEVICES} devices, {MICROBATCHES} microbatches; throughput vs 1 device, bubble vs "
        "analytic (issue bar: >= 2.6x, |bubble - analytic| <= 0.05)"
    )
    print(
        f"{'model':<11} {'schedule':<9} {'stages by':<10} {'1 dev us':>9} {'pipe us':>8} "
        f"{'thru':>6} {'bubble':>7} {'analytic':>8} {'diff':>6} {'copies':>7} {'free':>6} "
        f"{'imbal':>6} {'max err':>8}"
    )
    with mnrt.Context() as ctx:
        for label, (model, kw, layers) in MODELS.items():
            builder, inputs = model(**kw)
            stacked = {
                k: rng.standard_normal((MICROBATCHES, *v.shape)).astype(v.dtype)
                for k, v in inputs.items()
            }
            one = ctx.compile(
                builder, inputs, options={"mpmd": {"devices": [0], "microbatches": MICROBATCHES}}
            )
            base = one.timeline().makespan_s
            want = one(stacked)
            one.close()
            for schedule, stages in (("gpipe", DEVICES), ("circular", 2 * DEVICES)):
                for by in ("cost", "layers"):
                    mpmd = {
                        "devices": list(range(DEVICES)),
                        "stages": stages,
                        "microbatches": MICROBATCHES,
                        "schedule": schedule,
                    }
                    options = {"mpmd": mpmd}
                    if by == "layers":
                        options["stage_assignment"] = _layers(layers, stages)
                    pipe = ctx.compile(builder, inputs, options=options)
                    timeline = pipe.timeline()
                    got = pipe(stacked)
                    err = max(float(np.abs(got[k] - want[k]).max()) for k in want)
                    copies = sum(
                        timeline.end_s[s.key] - timeline.start_s[s.key]
                        for s in timeline.spans
                        if s.kind == "copy"
                    )
                    analytic = analytic_bubble(schedule, DEVICES, stages, MICROBATCHES)
                    spans = pipe.spans()
                    free = place(
                        [
                            dataclasses.replace(s, duration_s=0.0) if s.kind == "copy" else s
                            for s in spans
                        ]
                    )
                    stage_s = [s.duration_s for s in spans if s.kind == "program"]
                    print(
                        f"{label:<11} {schedule:<9} {by:<10} {base * 1e6:>9.1f} "
                        f"{timeline.makespan_s * 1e6:>8.1f} {base / timeline.makespan_s:>5.2f}x "
                        f"{timeline.bubble_fraction:>7.3f} {analytic:>8.3f} "
                        f"{timeline.bubble_fraction - analytic:>+6.3f} "
                        f"{copies / (DEVICES * timeline.makespan_s):>7.1%} "
                        f"{free.bubble_fraction:>6.3f} "
                        f"{max(stage_s) / (sum(stage_s) / len(stage_s)):>6.2f} {err:>8.1e}"
                    )
                    pipe.close()
    p, m = DEVICES, MICROBATCHES
    print(
        f"ideal throughput: GPipe p m / (m + p - 1) = {p * m / (m + p - 1):.2f}x; circular "
        f"(v = 2) p v m / (v m + p - 1) = {p * 2 * m / (2 * m + p - 1):.2f}x"
    )


if __name__ == "__main__":
    run()
