"""Fixtures of the dashboard tests: the bundled CNN compiled into a codegen_dir once, and
the committed multi-device pipeline binary, and small chain binaries that differ for the
two-binary Binary page. The tests are skipped where the `dashboard`
extra is not installed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

from binaries import chain_capture, perturbed, weight_sites
from cli_harness import invoke_cli

import mnrt
from mnrt.compiler.models import MODELS

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


@pytest.fixture(scope="session")
def cnn_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dashboard") / "cnn_cg"
    builder, inputs = MODELS["cnn"]()
    with mnrt.Context() as ctx:
        ctx.compile(builder, inputs, codegen_dir=folder)
    return folder


@pytest.fixture(scope="session")
def pipeline() -> Path:
    """Four devices in a pipeline: copies, recorded and awaited events."""
    return SAMPLES / "pipeline.mnlb"


@pytest.fixture(scope="session")
def chains(tmp_path_factory) -> dict[str, Path]:
    """A chain of 20 kernels, the same with one weight perturbed, and a chain of 21."""
    folder = tmp_path_factory.mktemp("chains")
    a = chain_capture(20)
    _, _, weight = weight_sites(a)[3]
    binaries = {"a": a, "weight": perturbed(a, weight), "longer": chain_capture(21)}
    for name, binary in binaries.items():
        binary.save(folder / f"{name}.mnlb")
    return {name: folder / f"{name}.mnlb" for name in binaries}


@pytest.fixture(scope="session")
def profiled_dir(tmp_path_factory, cnn_dir) -> Path:
    """The CNN's codegen_dir with a run report and a profile of its binary beside it."""
    folder = tmp_path_factory.mktemp("profiled") / "cnn_cg"
    shutil.copytree(cnn_dir, folder)
    code, out = invoke_cli(
        "run",
        folder / "model.mnlb",
        "--report",
        folder / "run_report.json",
        "--profile",
        folder / "trace.json",
    )
    assert code == 0, out
    return folder
