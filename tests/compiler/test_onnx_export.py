"""Graph IR to ONNX: exported models compute what the device computes."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler.models import MODELS
from mnrt.compiler.onnx_export import ExportError, to_onnx
from mnrt.compiler.passes import fuse_chains

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402


@pytest.mark.parametrize("model", sorted(MODELS))
def test_exported_models_match_the_device(model):
    builder, inputs = MODELS[model]()
    graph = builder.build()
    exported = ReferenceEvaluator(to_onnx(graph)).run(None, inputs)
    with mnrt.Context() as ctx:
        device = ctx.compile(builder, inputs)(inputs)[graph.outputs[0]].cpu()
    np.testing.assert_allclose(exported[0], device, rtol=1e-4, atol=1e-5)


def test_fused_epilogues_export_as_the_kernel_then_the_activation():
    rng = np.random.default_rng(0)
    b = GraphBuilder("ep")
    x = b.input("x", (1, 2, 6, 6), "float")
    y = b.conv2d(x, b.param("w", rng.standard_normal((3, 2, 3, 3)).astype(np.float32)))
    y = b.reshape(b.silu(y), shape=(1, 48))
    b.output(b.gelu(b.gemm(y, b.param("fc", rng.standard_normal((48, 4)).astype(np.float32)))))
    inputs = {"x": rng.standard_normal((1, 2, 6, 6)).astype(np.float32)}
    with mnrt.Context() as ctx:
        fn = ctx.compile(b, inputs, options={"option_json": "O3", "float_dtype": "float"})
        epilogues = [n.attrs.get("epilogue") for n in fn.graph.nodes if "epilogue" in n.attrs]
        assert epilogues == ["silu", "gelu"]
        device = fn(inputs)[fn.graph.outputs[0]].cpu()
    exported = ReferenceEvaluator(to_onnx(fn.graph)).run(None, inputs)
    np.testing.assert_allclose(exported[0], device, rtol=1e-4, atol=1e-5)


def test_codegen_dir_has_the_optimised_onnx_and_out_onnx_writes_it(tmp_path):
    builder, inputs = MODELS["mlp"]()
    with mnrt.Context() as ctx:
        ctx.compile(builder, inputs, codegen_dir=tmp_path / "cg",
                    options={"out_onnx": str(tmp_path / "out.onnx")})  # fmt: skip
    for path in (tmp_path / "cg" / "model.onnx", tmp_path / "out.onnx"):
        onnx.checker.check_model(onnx.load(str(path)))
    report = json.loads((tmp_path / "cg" / "report.json").read_text())
    assert {"name": "onnx export", "status": "ok"}.items() <= report["phases"][-1].items()


def test_codegen_dirs_model_onnx_takes_its_weights_from_graph_params_npz(tmp_path):
    # Before, model.onnx held a second copy of every weight (VGG-19: 575 MB written twice).
    rng = np.random.default_rng(0)
    b = GraphBuilder("wide")
    h = b.relu(b.gemm(b.input("x", (4, 256)), b.param("w0", rng.random((256, 256), np.float32))))
    b.output(b.gemm(h, b.param("w1", rng.random((256, 8), np.float32)), trans_b=False), "y")
    inputs = {"x": rng.random((4, 256), np.float32)}
    with mnrt.Context() as ctx:
        options = {"out_onnx": str(tmp_path / "out.onnx"), "float_dtype": "float"}
        fn = ctx.compile(b, inputs, codegen_dir=tmp_path / "cg", options=options)
        device = fn(inputs)[fn.graph.outputs[0]].cpu()
    folder = tmp_path / "cg"
    weights = sum(fn.graph.values[n].data.nbytes for n in fn.graph.params)
    assert (folder / "model.onnx").stat().st_size < weights / 4
    assert (tmp_path / "out.onnx").stat().st_size > weights  # out_onnx stands alone
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data
                 if e.key == "location"}  # fmt: skip
    assert locations == {"graph.params.npz"}
    for path in (folder / "model.onnx", tmp_path / "out.onnx"):
        exported = ReferenceEvaluator(str(path)).run(None, inputs)
        np.testing.assert_allclose(exported[0], device, rtol=1e-4, atol=1e-5)
    again = mnrt.Context().load_codegen_dir(folder)  # the archive still loads as before
    np.testing.assert_array_equal(again(inputs)[fn.graph.outputs[0]].cpu(), device)


def test_unexportable_kernels_are_named():
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float")
    b.output(b.rmsnorm(x), "y")
    with pytest.raises(ExportError, match="no ONNX export for kernel\\(s\\) rmsnorm"):
        to_onnx(b.build())


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_chains_export_as_their_steps(model):
    builder, inputs = MODELS[model]()
    with mnrt.Context() as ctx:
        fn = ctx.compile(builder, inputs, options={"option_json": "O3", "float_dtype": "float"})
        assert "chain" in [n.op for n in fn.graph.nodes]
        device = fn(inputs)[fn.graph.outputs[0]].cpu()
    exported = to_onnx(fn.graph)
    assert "chain" not in {n.op_type for n in exported.graph.node}
    out = ReferenceEvaluator(exported).run(None, inputs)
    np.testing.assert_allclose(out[0], device, rtol=1e-4, atol=1e-5)


def test_a_chain_with_an_unexportable_step_names_the_step():
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float")
    b.output(b.rmsnorm(b.relu(x)), "y")
    graph = fuse_chains(b.build())
    assert [n.op for n in graph.nodes] == ["chain"]
    with pytest.raises(ExportError, match="no ONNX export for kernel\\(s\\) rmsnorm"):
        to_onnx(graph)


def test_without_onnx_codegen_dir_skips_model_onnx_and_out_onnx_says_what_is_missing(
    tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    b = GraphBuilder("g")
    b.output(b.relu(b.input("x", (4, 8), "float")), "y")
    x = {"x": np.ones((4, 8), np.float32)}
    with mnrt.Context() as ctx:
        ctx.compile(b, x, codegen_dir=tmp_path / "cg")
        report = json.loads((tmp_path / "cg" / "report.json").read_text())
        export = next(p for p in report["phases"] if p["name"] == "onnx export")
        assert "pip install mnrt[onnx]" in export["status"]
        assert not (tmp_path / "cg" / "model.onnx").exists()
        with pytest.raises(mnrt.InvalidArgumentError, match=r"pip install mnrt\[onnx\]"):
            ctx.compile(b, x, options={"out_onnx": str(tmp_path / "m.onnx")})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_exports_the_form_it_computes(approximate):
    # The tanh form differs from the erf form by up to 4e-4: exported as erf, it was wrong.
    b = GraphBuilder("g")
    b.output(b.gelu(b.input("x", (64,), "float"), approximate=approximate), "y")
    graph = b.build()
    x = {"x": np.linspace(-6, 6, 64, dtype=np.float32)}
    exported = ReferenceEvaluator(to_onnx(graph)).run(None, x)[0]
    with mnrt.Context() as ctx:
        device = ctx.compile(b, x, options={"float_dtype": "float"})(x)["y"].cpu()
    np.testing.assert_allclose(exported, device, rtol=1e-6, atol=1e-6)
