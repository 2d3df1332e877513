"""Whole processes: `mnrt run model.mnlb` against a Python process that creates an
onnxruntime session for the same model and runs it once (issue 12's whole-process figure).

Figures (light ResNet-50 of the `onnx` wheel by default, compiled here at float_dtype=float):
  wall time of `mnrt run`, median / onnxruntime's median: target <= 1.0x
  peak RSS of `mnrt run` / onnxruntime's: target < 1.0x

Each process is started fresh (alternating A B A B after one warm-up of each); wall time is
measured around it and its peak RSS read from the kernel (wait4: a child starts from the
RSS of the process that started it, so the model is compiled in a process of its own and
this one stays small; the floor line is `python -c pass`). Run once to compile
(bytecode is written as `pip install` writes it; an environment with
PYTHONDONTWRITEBYTECODE=1 and an editable install would otherwise compile mnrt's sources
in every process).

    pip install onnxruntime   # for this benchmark only
    python benchmarks/bench_process.py [--model resnet50] [--runs 7]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_compile_time import light_model

COMPILE = """
import sys
import numpy as np
import onnx
import mnrt
model, x = onnx.load(sys.argv[1]), np.load(sys.argv[2])
inputs = {sys.argv[3]: x}
with mnrt.Context() as ctx:
    ctx.compile(model, inputs, options={"float_dtype": "float"}).save_binary(sys.argv[4])
"""

ORT_ONCE = """
import sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
session.run(None, {session.get_inputs()[0].name: np.load(sys.argv[2])})
"""


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one process running `argv` to its end."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {proc.returncode}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50", help="a light model of the onnx wheel")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    compileall.compile_dir(importlib.util.find_spec("mnrt").submodule_search_locations[0], quiet=1)
    model, inputs = light_model(args.model)
    if len(inputs) != 1:
        raise SystemExit(f"light {args.model} has {len(inputs)} inputs; this compares one")
    with tempfile.TemporaryDirectory() as tmp:
        import onnx

        onnx_path, x_path = Path(tmp) / "model.onnx", Path(tmp) / "x.npy"
        binary = Path(tmp) / f"{args.model}.mnlb"
        onnx.save(model, onnx_path)
        ((name, x),) = inputs.items()
        np.save(x_path, x)
        del model, inputs, x
        subprocess.run(
            [sys.executable, "-c", COMPILE, str(onnx_path), str(x_path), name, str(binary)],
            check=True,
        )
        sides = {
            "floor": [sys.executable, "-c", "pass"],
            "mnrt run": [sys.executable, "-m", "mnrt", "run", str(binary)],
            "onnxruntime": [sys.executable, "-c", ORT_ONCE, str(onnx_path), str(x_path)],
        }
        for argv in sides.values():  # warm-up: page cache, bytecode
            timed(argv)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for _ in range(args.runs):
            for name, argv in sides.items():
                samples[name].append(timed(argv))
    wall = {n: statistics.median(w for w, _ in s) for n, s in samples.items()}
    peak = {n: statistics.median(p for _, p in s) for n, s in samples.items()}
    print(
        f"light {args.model}: whole processes, median of {args.runs} alternating runs "
        f"({os.cpu_count()} cores)"
    )
    for name in sides:
        print(f"  {name:<12} wall {wall[name]:6.2f} s   peak RSS {peak[name]:7.1f} MiB")
    ratio, mem = wall["mnrt run"] / wall["onnxruntime"], peak["mnrt run"] / peak["onnxruntime"]
    print(f"  wall ratio {ratio:.2f}x (target <= 1.0x)   peak RSS ratio {mem:.2f}x (target < 1.0x)")


if __name__ == "__main__":
    main()
