"""Running commands under `mpiexec` for the distributed-replay tests (this folder is on
sys.path through tests/conftest.py). The `mpich` wheel of `mnrt[mpi]` puts `mpiexec` beside
the environment's python; without it the tests that need it are skipped, saying so."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# A hang guard, not a timing: a distributed run that fails must end every rank long before.
HANG_GUARD_S = 120


def mpiexec() -> str:
    """The path of mpiexec, or skip the test when MPI is not installed."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpiexec / mpi4py are not installed: pip install 'mnrt[mpi]'")
    return found


def mnrt_command() -> list[str]:
    """`mnrt` as this environment runs it."""
    return [sys.executable, "-m", "mnrt"]


def run_mpi(ranks: int, *command: str | os.PathLike, env: dict | None = None):
    """`mpiexec -n RANKS COMMAND...` -> CompletedProcess (text output); a run still going
    after HANG_GUARD_S seconds fails the test."""
    args = [mpiexec(), "-n", str(ranks), *map(str, command)]
    try:
        return subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(args)} hung past {HANG_GUARD_S} s: {e.stderr}")


def run_mpmd(*parts: list[str | os.PathLike]):
    """mpiexec's MPMD form, `mpiexec -n 1 A : -n 1 B`: one rank per part, each its command
    (so one rank can be given another file, option or environment)."""
    args = [mpiexec()]
    for i, part in enumerate(parts):
        args += ([":"] if i else []) + ["-n", "1", *map(str, part)]
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(args)} hung past {HANG_GUARD_S} s: {e.stderr}")
