"""ONNX's operator suite (the node cases the installed onnx wheel generates) through mnrt,
and through onnxruntime side by side when it is installed: per-op pass / refused / wrong /
crash counts, totals, and why cases are refused.

Figures (issue 12): mnrt passes at least 1,300 of the ~1,884 cases with 0 wrong and 0 crash;
onnxruntime's counts under the same comparison (each case's rtol and atol, dtype and shape)
for reference. The case-running logic lives in tests/compiler/onnx_suite.py, which
tests/compiler/test_onnx_node_suite.py shares.

    pip install onnx onnxruntime
    python benchmarks/onnx_node_suite.py [--json table.json] [--ops Add,Relu] [--all-ops]
                                         [--preset O3] [--mixed]

--preset compiles every case at that preset (default O1, the compiler's default); --mixed
with float_dtype=mixed where the case computes in float: what a preset's precision passes
do to each op, at the suite's own (exact) tolerances, so "wrong" there can be half's
rounding rather than a defect.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "compiler"))

import onnx_suite

from mnrt.format.files import write_atomically


def _row(op: str, counts: dict, other: dict | None) -> str:
    cells = [f"{counts.get(v, 0):>8}" for v in onnx_suite.VERDICTS]
    if other is not None:
        cells += ["  |"] + [f"{other.get(v, 0):>8}" for v in onnx_suite.VERDICTS]
    return f"{op:<36}" + "".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the per-case table here")
    parser.add_argument("--ops", help="only these ops (comma-separated)")
    parser.add_argument(
        "--all-ops", action="store_true", help="print every op, not only those mnrt fails"
    )
    parser.add_argument("--reasons", type=int, default=25, help="refusal reasons to print")
    parser.add_argument("--preset", default="O1", help="compile preset (default: O1)")
    parser.add_argument(
        "--mixed", action="store_true", help="float_dtype=mixed where a case computes in float"
    )
    args = parser.parse_args()
    t0 = time.perf_counter()
    cases = onnx_suite.node_cases()
    if args.ops:
        wanted = set(args.ops.split(","))
        cases = [c for c in cases if onnx_suite.op_of(c).removesuffix(" (expanded)") in wanted]
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with onnx_suite.one_context() as ctx:
        mine = [onnx_suite.run_mnrt(c, ctx, args.preset, args.mixed) for c in cases]
    mnrt_s = time.perf_counter() - t0
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        theirs = None
    else:
        t0 = time.perf_counter()
        theirs = [onnx_suite.run_onnxruntime(c) for c in cases]
    ort_s = time.perf_counter() - t0 if theirs is not None else 0.0

    tally, other = onnx_suite.Tally(), onnx_suite.Tally()
    for r in mine:
        tally.add(r)
    for r in theirs or []:
        other.add(r)
    head = "".join(f"{v:>8}" for v in onnx_suite.VERDICTS)
    print(f"{'op':<36}{'mnrt:':>8}" + ("   onnxruntime:" if theirs is not None else ""))
    print(f"{'':<36}{head}" + (f"  |{head}" if theirs is not None else ""))
    for op in sorted(tally.per_op):
        counts = tally.per_op[op]
        if args.all_ops or counts["pass"] != sum(counts.values()):
            print(_row(op, counts, other.per_op.get(op) if theirs is not None else None))
    total = {v: tally.total(v) for v in onnx_suite.VERDICTS}
    their_total = {v: other.total(v) for v in onnx_suite.VERDICTS}
    print(_row(f"TOTAL ({len(cases)} cases)", total, their_total if theirs is not None else None))
    timing = f"generating the cases: {gen_s:.1f} s; mnrt: {mnrt_s:.1f} s"
    if theirs is not None:
        timing += f"; onnxruntime: {ort_s:.1f} s"
    print("\n" + timing)
    print(f"\nmnrt's {args.reasons} most common refusal reasons:")
    for reason, n in tally.reasons.most_common(args.reasons):
        print(f"  {n:>4}  {reason}")
    bad = [r for r in mine if r.verdict in ("wrong", "crash")]
    for r in bad:
        print(f"{r.verdict.upper()}: {r.case}: {r.detail}")
    if args.json:
        table = [
            {**vars(r), "onnxruntime": vars(o)["verdict"] if theirs is not None else None}
            for r, o in zip(mine, theirs or mine)
        ]
        write_atomically(args.json, json.dumps(table, indent=1).encode())
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
