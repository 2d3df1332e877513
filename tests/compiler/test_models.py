"""The compiler's own models (MLP, CNN, transformer block): compile, save_binary, mnrt run,
at float and at mixed precision; and `mnrt demo`."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import mnrt
from mnrt.compiler.models import MODELS
from mnrt.runner.cli import cli


@pytest.mark.parametrize("float_dtype", ["float", "mixed"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_model_compiles_saves_and_replays(tmp_path, model, float_dtype):
    builder, inputs = MODELS[model]()
    with mnrt.Context() as ctx:
        compiled = ctx.compile(builder, inputs, options={"float_dtype": float_dtype})
        outputs = compiled(inputs)
        reference = compiled.reference(inputs)
        # Stated tolerances against the float64 reference: float 1e-4, mixed (half GEMM/conv) 3e-2.
        tol = 1e-4 if float_dtype == "float" else 3e-2
        for name, proxy in outputs.items():
            np.testing.assert_allclose(proxy.cpu(), reference[name], rtol=tol, atol=tol)
        path = tmp_path / f"{model}.mnlb"
        compiled.save_binary(path)
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("PASS")


def test_demo_command(tmp_path):
    out = tmp_path / "demo.mnlb"
    r = CliRunner().invoke(cli, ["demo", "--model", "mlp", "-O", "O2", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "float_dtype=mixed" in r.output and "PASS" in r.output
    assert mnrt.replay(out).passed


def test_demo_takes_any_compile_option():
    r = CliRunner().invoke(cli, ["demo", "--model", "mlp", "--option", "scheduler=min_memory"])
    assert r.exit_code == 0 and "PASS" in r.output, r.output
    r = CliRunner().invoke(cli, ["demo", "--model", "mlp", "--option", "layout_spec=((8_Q),)"])
    assert r.exit_code == 2 and "unknown unit 'Q'" in r.output
    r = CliRunner().invoke(cli, ["demo", "--option", "scheduler"])
    assert r.exit_code == 2 and "name=value" in r.output
