"""Honest goldens on the nine light models that the onnx wheel ships.

Figures (issue 12, Deliver 5), per light model (onnx/backend/test/data/light) and
float_dtype:
  own:     the compiled binary replays and passes its own goldens (target: pass)
  exact:   it passes with --rtol 0 --atol 0 on this machine: bit for bit (target: pass)
  scaled:  the same program with its last GEMM/convolution's output scaled by 1.01 (a
           `mul` inserted in the compiled graph, goldens of the unmodified one) (target: FAIL)
  accuracy: the compile's check of the outputs against onnxruntime (reported)
  other BLAS (with --other-blas): the unmodified binary replayed by `mnrt run` under each
           other OpenBLAS kernel this CPU runs (OPENBLAS_CORETYPE), which sums float32
           GEMMs in another order: how many pass (target: all)
A model the compiler refuses is listed with the reason. The tolerance the goldens carry
(largest atol relative to the output's scale) is printed for reference. "saturated" marks
a binary whose checked values hit half's largest magnitude (the compile warns): there the
scaled result rounds to the same bits, and no golden can tell them apart.

    pip install onnx onnxruntime   # for this benchmark only
    python benchmarks/bench_goldens.py [--model resnet50] [--float-dtype mixed] [--other-blas]
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import mnrt
from mnrt.compiler import goldens
from mnrt.compiler.ir import MATRIX_OPS

FLOAT_DTYPES = ("double", "float", "mixed", "half")


def light_models() -> list[str]:
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(glob.glob(str(folder / "*.onnx")))


def example_inputs(model) -> dict[str, np.ndarray]:
    """Random data for every graph input that no initializer fills."""
    from onnx import helper

    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def blas_cores() -> list[str]:
    """OpenBLAS kernels other than this machine's default that its CPU can run."""
    cores = ["Sandybridge", "Zen", "Prescott"]
    try:
        if "avx512f" in Path("/proc/cpuinfo").read_text():
            cores.append("SkylakeX")
    except OSError:
        pass
    return cores


def other_blas(path: Path) -> tuple[int, int]:
    """How many replays of the binary under other OpenBLAS kernels pass, of how many."""
    passed = []
    for core in blas_cores():
        env = {**os.environ, "OPENBLAS_CORETYPE": core}
        run = subprocess.run([sys.executable, "-m", "mnrt", "run", str(path)],
                             capture_output=True, env=env)  # fmt: skip
        passed.append(run.returncode == 0)
    return sum(passed), len(passed)


def one(ctx: mnrt.Context, model, inputs: dict, float_dtype: str, folder: Path, blas: bool) -> dict:
    """The figures of one model at one float_dtype."""
    t0 = time.perf_counter()
    compiled = ctx.compile(model, inputs, options={"float_dtype": float_dtype})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accuracy = compiled.save_binary_and_check(folder / "own.mnlb")
    compile_s = time.perf_counter() - t0
    own = mnrt.replay(folder / "own.mnlb")
    others = other_blas(folder / "own.mnlb") if blas else (0, 0)
    exact = mnrt.replay(folder / "own.mnlb", rtol=0.0, atol=0.0)
    q = ctx.queue
    compiled(inputs)
    names = goldens.checked_values(compiled)
    results = {n: q.enqueue_read_buffer(compiled.lowered.bindings[n]) for n in names}
    last = max(i for i, n in enumerate(compiled.graph.nodes) if n.op in MATRIX_OPS)
    wrong = goldens.scaled_copy(compiled, last, 1.01)
    mnrt.begin_capture()
    try:
        wrong(inputs)
        goldens.record_goldens(wrong, q, results)
    finally:
        binary = mnrt.end_capture()
    scaled = mnrt.replay(binary)
    for buf in {id(b): b for b in wrong.lowered.bindings.values()}.values():
        buf.deallocate()
    worst = max(accuracy["outputs"].values(), key=lambda o: o["max_rel_err"])
    relative = [c.atol / max(float(np.max(np.abs(results[c.name]))), 1e-300) for c in own.checks]
    return {
        "own": own.passed,
        "exact": exact.passed,
        "scaled": scaled.passed,
        "caught_by": ", ".join(c.name for c in scaled.checks if not c.passed)
        or ("- (saturated)" if accuracy.get("saturated") else "-"),
        "atol/scale": max(relative, default=0.0),
        "accuracy": f"{'ok' if worst['passed'] else 'MISS'} vs {accuracy['reference']}",
        "warnings": len(caught),
        "seconds": compile_s,
        "other_blas": others,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="only light models whose file name contains this")
    parser.add_argument("--float-dtype", choices=FLOAT_DTYPES, action="append")
    parser.add_argument("--other-blas", action="store_true",
                        help="also replay each binary under other OpenBLAS kernels")  # fmt: skip
    args = parser.parse_args()
    import onnx

    from mnrt.compiler.onnx import from_onnx

    dtypes = args.float_dtype or FLOAT_DTYPES
    print(f"{'model':<22}{'float_dtype':<12}{'own':<6}{'exact':<7}{'scaled x1.01':<14}"
          f"{'caught by':<22}{'atol/scale':<12}{'accuracy':<24}{'s':>6}  other BLAS")  # fmt: skip
    failures = 0
    with tempfile.TemporaryDirectory() as tmp, mnrt.Context() as ctx:
        for path in light_models():
            name = Path(path).stem.removeprefix("light_")
            if args.model and args.model not in name:
                continue
            model = onnx.load(path)
            try:
                from_onnx(model)
            except mnrt.MnrtError as e:
                print(f"{name:<22}refused: {str(e).splitlines()[-1].strip()}")
                continue
            inputs = example_inputs(model)
            for float_dtype in dtypes:
                r = one(ctx, model, inputs, float_dtype, Path(tmp), args.other_blas)
                passed, tried = r["other_blas"]
                ok = r["own"] and r["exact"] and not r["scaled"] and passed == tried
                failures += not ok
                print(f"{name:<22}{float_dtype:<12}{'pass' if r['own'] else 'FAIL':<6}"
                      f"{'pass' if r['exact'] else 'FAIL':<7}"
                      f"{'FAIL (ok)' if not r['scaled'] else 'pass (BAD)':<14}"
                      f"{r['caught_by'][:21]:<22}{r['atol/scale']:<12.2e}{r['accuracy']:<24}"
                      f"{r['seconds']:>6.1f}  {f'{passed}/{tried}' if tried else '-'}",
                      flush=True)  # fmt: skip
    print(f"{failures} model/float_dtype case(s) missed a target")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
