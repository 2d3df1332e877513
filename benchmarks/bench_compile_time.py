"""Compile time of a real model against onnxruntime creating a session for it and running it
once, side by side in one process (issue 12, Deliver 7).

Figures (VGG-19 from the `onnx` wheel's light models by default; its 548 MB of weights are
ConstantOfShape nodes that both sides fold at load):
  mnrt compile without a codegen_dir / onnxruntime session + one run: target <= 1.5x
  mnrt compile with a codegen_dir    / onnxruntime session + one run: target <= 3x

A codegen_dir holds the model's light binary: its goldens are the compiled program's own
results, checked against onnxruntime's (compiler/goldens.py), so that compile runs the
network on the device and onnxruntime (unoptimised: one run) once each. Each side is timed
in alternating rounds, fastest of all.

    pip install onnxruntime   # for this benchmark only
    python benchmarks/bench_compile_time.py [--model vgg19] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import verdict

import mnrt


def light_model(name: str) -> tuple[object, dict[str, np.ndarray]]:
    """The light model `name` of the installed onnx wheel, and a random input for it. Outputs
    no node reads (Dropout's mask) are dropped, as onnxruntime drops them."""
    import onnx

    path = Path(onnx.__file__).parent / "backend/test/data/light" / f"light_{name}.onnx"
    model = onnx.load(path)
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    for node in model.graph.node:
        while len(node.output) > 1 and node.output[-1] not in read:
            node.output.pop()
    fed = {n.output[0] for n in model.graph.node} | {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    inputs = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
        if i.name not in fed
    }
    return model, inputs


def fastest(sides: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Each side's fastest wall time over `rounds` alternating rounds (a slow spell on a
    shared machine hits every side alike), after one untimed round."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(rounds + 1):
        for name, side in sides.items():
            start = time.perf_counter()
            side()
            if round_:
                times[name].append(time.perf_counter() - start)
            time.sleep(0.2)  # onnxruntime's pool spins for a while after a run
    return {name: min(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="vgg19", help="a light model of the onnx wheel")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        raise SystemExit(
            "this benchmark compares with onnxruntime: pip install onnxruntime"
        ) from None
    model, inputs = light_model(args.model)
    data = model.SerializeToString()
    folder = Path(tempfile.mkdtemp(prefix="bench-compile-"))

    def ort_once() -> None:
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        session.run(None, inputs)

    def compile_once(codegen_dir: Path | None) -> None:
        with mnrt.Context() as ctx:
            ctx.compile(model, inputs, codegen_dir=codegen_dir)

    try:
        best = fastest(
            {
                "ort": ort_once,
                "mnrt": lambda: compile_once(None),
                "mnrt+cg": lambda: compile_once(folder / "cg"),
            },
            args.rounds,
        )
        size = sum(f.stat().st_size for f in (folder / "cg").iterdir())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"light {args.model}: compile vs onnxruntime {ort.__version__} session + one run "
        f"(CPU, {os.cpu_count()} cores), fastest of {args.rounds} alternating rounds"
    )
    print(f"  onnxruntime session + run            {best['ort']:8.2f} s")
    for key, label, target in (
        ("mnrt", "mnrt compile, no codegen_dir", 1.5),
        ("mnrt+cg", f"mnrt compile + codegen_dir ({size / 1e6:.0f} MB)", 3.0),
    ):
        ratio = best[key] / best["ort"]
        print(
            f"  {label:<36} {best[key]:8.2f} s  {ratio:5.2f}x  target <= {target}x "
            f"{verdict(ratio, target, higher_is_better=False)}"
        )


if __name__ == "__main__":
    main()
