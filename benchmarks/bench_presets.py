"""What a compiler change does to the modelled program of real models, preset by preset.

For each ONNX model given (files, or the onnx wheel's light models) and each
PRESET:FLOAT_DTYPE configuration, the compiled program's modelled time and energy (its
plan: every kernel of one run, no uploads; what bench_mapping.py reads) and the kernels it
runs. With --json the figures are saved; with --against OLD.json each is printed beside
the same figure of an earlier run (another checkout's), with the change in percent, and
the models that got slower or took more energy are listed. The orders a higher preset
promises are checked on every model that has both sides: O2 mixed no slower than O1 float,
O3 no slower than O2 (both mixed), O3 mixed no slower than O3 float.

A model's inputs: FILE.npz beside FILE.onnx when there is one (an exporter's example
inputs, by input name), else random data for every input no initializer fills.

    pip install onnx   # for this benchmark only
    python benchmarks/bench_presets.py [MODEL.onnx ...] [--light-models] [--op-models]
        [--configs O1:float,O2:mixed,O3:float,O3:mixed] [--json new.json] [--against old.json]

--op-models adds the small models of benchmarks/op_models.py (activations, reductions,
a ConvTranspose decoder), whose import the frontend's one-kernel converters changed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import op_models
from bench_goldens import example_inputs, light_models

import mnrt
from mnrt.format.files import write_atomically

CONFIGS = "O1:float,O2:mixed,O3:float,O3:mixed"
# (higher, lower): the higher configuration's program must be no slower (0.05% for
# floating-point noise in summing the kernels' times).
ORDERS = (("O2:mixed", "O1:float"), ("O3:mixed", "O2:mixed"), ("O3:mixed", "O3:float"))
SLACK = 1.0005


def model_inputs(path: Path, model) -> dict[str, np.ndarray]:
    stored = path.with_suffix(".npz")
    if stored.exists():
        with np.load(stored) as data:
            return {name: data[name] for name in data.files}
    return example_inputs(model)


def measure(ctx: mnrt.Context, path: Path, configs: list[str]) -> dict[str, dict]:
    """Each configuration's modelled time (us), energy (mJ) and kernels run for one model."""
    import onnx

    model = onnx.load(path)
    inputs = model_inputs(path, model)
    figures = {}
    for config in configs:
        preset, dtype = config.split(":")
        compiled = ctx.compile(model, inputs, options={"option_json": preset, "float_dtype": dtype})
        try:
            plan = compiled.lowered.program.plan(compiled.lowered.bindings)
            figures[config] = {
                "time_us": plan.modelled.time_s * 1e6,
                "energy_mj": plan.modelled.energy_j * 1e3,
                "kernels": len(plan.steps),
            }
        finally:
            compiled.close()
    return figures


def _cell(new: dict, old: dict | None, compared: bool) -> str:
    """A configuration's kernels and time, and its change where the run is `compared` with
    an earlier one (blank where that one lacks it)."""
    text = f"{new['kernels']:>4}, {new['time_us']:9.1f} us"
    if not compared:
        return f"{text:>20}"
    change = "" if old is None else f"{new['time_us'] / old['time_us'] - 1:+7.2%}"
    return f"{text:>20} {change:>8}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", type=Path, help="ONNX files")
    parser.add_argument("--light-models", action="store_true", help="the onnx wheel's too")
    parser.add_argument("--op-models", action="store_true", help="benchmarks/op_models.py's")
    parser.add_argument("--configs", default=CONFIGS, help=f"default: {CONFIGS}")
    parser.add_argument("--json", type=Path, help="save the figures here")
    parser.add_argument("--against", type=Path, help="figures of an earlier run (--json)")
    args = parser.parse_args()
    paths = list(args.models) + ([Path(p) for p in light_models()] if args.light_models else [])
    scratch = tempfile.TemporaryDirectory()
    if args.op_models:
        paths += op_models.write(Path(scratch.name))
    if not paths:
        parser.error("give ONNX files, --light-models, --op-models, or any of them")
    configs = args.configs.split(",")
    old = json.loads(args.against.read_text()) if args.against else {}

    print(f"modelled program per configuration: kernels, time{' (change)' if old else ''}")
    width = 29 if old else 20
    print(f"  {'model':<28}" + "".join(f"  {c:>{width}}" for c in configs))
    results, worse, out_of_order = {}, [], []
    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    try:
        for path in paths:
            name = path.stem
            figures = results[name] = measure(ctx, path, configs)
            before = old.get(name, {})
            print(
                f"  {name:<28}"
                + "".join(f"  {_cell(figures[c], before.get(c), bool(old))}" for c in configs)
            )
            for config, f in figures.items():
                was = before.get(config)
                if was and (
                    f["time_us"] > was["time_us"] * SLACK
                    or f["energy_mj"] > was["energy_mj"] * SLACK
                ):
                    worse.append(f"{name} {config}")
            for high, low in ORDERS:
                both = high in figures and low in figures
                if both and figures[high]["time_us"] > figures[low]["time_us"] * SLACK:
                    out_of_order.append(f"{name}: {high} slower than {low}")
    finally:
        ctx.close()
        scratch.cleanup()
    if old:
        print(f"slower or more energy than {args.against}: {', '.join(worse) or 'none'}")
    print(f"out of the presets' order: {'; '.join(out_of_order) or 'none'}")
    if args.json:
        write_atomically(args.json, json.dumps(results, indent=1).encode())
    sys.exit(1 if worse or out_of_order else 0)


if __name__ == "__main__":
    main()
