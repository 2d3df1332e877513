"""Replay's golden verification: a golden recorded without tolerances gets the tolerance
model's default for the kernels that produced its buffer, so a verdict does not depend on
the host's BLAS kernel while a wrong result still fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hostile import edited

import mnrt
from mnrt.device.tolerance import default_tolerance

MLP = Path(__file__).resolve().parents[2] / "samples" / "mlp.mnlb"


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("core", ["Haswell", "SkylakeX", "Sandybridge", "Zen", "Prescott"])
def test_the_mlp_sample_passes_on_every_blas_kernel(core):
    """samples/mlp.mnlb was captured on another machine: float32 GEMMs summed in another
    order moved elements near zero by 5e-5 of themselves (OpenBLAS's Prescott kernel by 7e-3),
    beyond the float dtype's default rtol of 1e-5."""
    if core == "SkylakeX" and not _has_avx512():
        pytest.skip("this CPU has no AVX-512, which OpenBLAS's SkylakeX kernel needs")
    env = {**os.environ, "OPENBLAS_CORETYPE": core}
    out = subprocess.run(
        [sys.executable, "-m", "mnrt", "run", str(MLP)], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("PASS")


def _scale_last_gemm(doc: dict, factor: float) -> None:
    """y = factor * (a @ b + c) in the binary's program: the last GEMM's output scaled."""
    for command in doc["commands"]:
        if command["cmd"]["type"] == "CreateProgram":
            gemm = [k for k in command["cmd"]["program"]["kernels"] if k["op"] == "gemm"][-1]
            for attr in gemm["attrs"]:
                if attr["name"] in ("alpha", "beta"):
                    attr["f"] = factor


def test_an_output_scaled_by_one_percent_fails_its_default_golden():
    binary = mnrt.LightBinary.load(MLP)
    assert mnrt.replay(binary).passed
    report = mnrt.replay(edited(binary, lambda doc: _scale_last_gemm(doc, 1.01)))
    assert not report.passed and report.checks[0].mismatches > 0


def test_the_default_widens_with_the_computation_and_only_then():
    """A read of data the host wrote keeps the dtype's default; a read of what kernels
    computed gets the model's tolerance, more for a longer chain of them."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        x = dev.create_buffer((16, 256), "float", name="x")
        w = dev.create_buffer((256, 256), "float", name="w")
        y = dev.create_buffer((16, 256), "float", name="y")
        z = dev.create_buffer((16, 256), "float", name="z")
        prog = dev.create_program([mnrt.Kernel("gemm", ["x", "w"], ["y"]),
                                   mnrt.Kernel("gemm", ["y", "w"], ["z"])])  # fmt: skip
        rng = np.random.default_rng(0)
        q.enqueue_write_buffer(x, rng.standard_normal((16, 256)).astype(np.float32))
        q.enqueue_write_buffer(w, rng.standard_normal((256, 256)).astype(np.float32) / 16)
        q.enqueue_read_buffer(x)
        q.enqueue_program(prog, {"x": x, "w": w, "y": y, "z": z})
        q.enqueue_read_buffer(y)
        q.enqueue_read_buffer(z)
        binary = mnrt.end_capture()
    report = mnrt.replay(binary)
    assert report.passed
    written, once, twice = report.checks
    assert (written.rtol, written.atol) == (mnrt.float32.rtol, mnrt.float32.atol)
    scale = lambda name: float(np.abs(report.outputs[name]).max())  # noqa: E731
    assert mnrt.float32.atol < once.atol / scale("y") < twice.atol / scale("z")


def test_a_default_golden_gets_the_models_tolerance_and_the_run_override_wins(small_binary):
    report = mnrt.replay(small_binary)
    (check,) = report.checks
    golden = report.outputs["y"]
    assert (check.rtol, check.atol) == default_tolerance(mnrt.float32, _exp_error(), golden)
    assert mnrt.replay(small_binary, rtol=0.0, atol=0.0).checks[0].atol == 0.0


def _exp_error() -> float:
    from mnrt.device.kernels import TensorSpec, lookup
    from mnrt.device.tolerance import kernel_errors

    spec = TensorSpec((2, 3), mnrt.float32)
    return kernel_errors(lookup("exp"), [spec], [spec], {}, [0.0])[0]
