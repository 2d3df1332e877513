"""Distributed replay over MPI against the in-process replay of the same binary.

The binary is samples/pipeline.py's 4-stage GPipe forward (one stage per device, every
microbatch's activation copied from board to board and ordered by events), captured at a
size where each stage's GEMM is real work. It is replayed by

    mnrt run FILE                        (in-process, 4 emulated devices: the baseline)
    mpiexec -n 2 mnrt run --mpi FILE     (2 ranks of 2 devices each)
    mpiexec -n 4 mnrt run --mpi FILE     (4 ranks of 1 device each)

Figures, each against the baseline measured in the same run (sides alternate, fastest of
`--repeat` rounds): outputs bitwise equal (every output's .npy, byte for byte); the whole
command's wall time (process start, MPI start, load, replay, report); and the replay's own
wall per loop: the report's wall over all loops / loops (rank 0's: its first loop begins
with the job's and its last ends once every rank's results are gathered; a single loop is
no measure, as the other ranks start their next loop before rank 0 ends its).

    python benchmarks/bench_mpi.py [--microbatches 8] [--batch 256] [--width 512]
                                   [--loops 5] [--repeat 3] [--blas-threads N]

`--blas-threads N` sets OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS for every
side alike: in one process the four devices' queue workers each call a BLAS that starts its
own threads, which on a machine of few cores oversubscribes it (every rank of a job has
fewer queue workers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MNRT = [sys.executable, "-m", "mnrt"]


def mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        raise SystemExit("mpiexec not found: pip install mnrt[mpi]")
    return found


def side(ranks: int, binary: Path, loops: int, folder: Path) -> list[str]:
    """The command line of one side: in-process (ranks 0) or `mpiexec -n RANKS`."""
    folder.mkdir(exist_ok=True)
    run = [*MNRT, "run", str(binary), "--loops", str(loops)]
    run += ["--save-outputs", str(folder / "outputs"), "--report", str(folder / "report.json")]
    return run if ranks == 0 else [mpiexec(), "-n", str(ranks), *run, "--mpi"]


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
    return wall


def outputs(folder: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((folder / "outputs").glob("*.npy"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--loops", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--blas-threads", type=int, default=None)
    args = parser.parse_args()
    env = dict(os.environ)
    if args.blas_threads is not None:
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = str(args.blas_threads)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        binary = work / "pipeline.mnlb"
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "samples" / "pipeline.py"),
                "--microbatches",
                str(args.microbatches),
                "--batch",
                str(args.batch),
                "--width",
                str(args.width),
                "--capture",
                str(binary),
            ],
            check=True,
            capture_output=True,
        )
        names = {0: "in-process", 2: "2 ranks", 4: "4 ranks"}
        walls: dict[int, list[float]] = {r: [] for r in names}
        loops: dict[int, list[float]] = {r: [] for r in names}
        for _ in range(args.repeat):  # sides alternate: a slow spell hits each alike
            for ranks in names:
                folder = work / str(ranks)
                walls[ranks].append(timed(side(ranks, binary, args.loops, folder), env))
                report = json.loads((folder / "report.json").read_text())
                loops[ranks].append(report["timings"]["wall_s"] / args.loops)
        per_loop = {r: min(loops[r]) for r in names}
        baseline = outputs(work / "0")
        print(
            f"pipeline: 4 stages, {args.microbatches} microbatches of {args.batch}x{args.width}"
            f" float32, {args.loops} loops per command, fastest of {args.repeat} rounds, BLAS"
            f" threads {args.blas_threads or 'default'}"
        )
        print(
            f"{'replay':<12} {'bitwise equal':>13} {'command s':>10} {'ratio':>6}"
            f" {'loop ms':>8} {'ratio':>6}"
        )
        for ranks, name in names.items():
            equal = "baseline" if ranks == 0 else str(outputs(work / str(ranks)) == baseline)
            wall = min(walls[ranks])
            print(
                f"{name:<12} {equal:>13} {wall:>10.3f} {wall / min(walls[0]):>6.2f}"
                f" {per_loop[ranks] * 1e3:>8.2f} {per_loop[ranks] / per_loop[0]:>6.2f}"
            )
        if any(outputs(work / str(r)) != baseline for r in (2, 4)) or not baseline:
            raise SystemExit("FAILED: distributed outputs differ from the in-process replay")


if __name__ == "__main__":
    main()
