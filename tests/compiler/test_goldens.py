"""Goldens of compiled binaries (mnrt/compiler/goldens.py): the compiled program's own
results with the tolerance model's bounds, so a binary passes its own goldens at every
float_dtype, bit for bit on the machine that made it, and fails when one GEMM or
convolution is off by 1%; and the compile's accuracy check against the reference."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from onnx_harness import initializer, onnx_model, onnx_module, value_info

import mnrt
from mnrt.compiler import goldens, models
from mnrt.compiler.ir import MATRIX_OPS
from mnrt.format import LightBinary
from mnrt.format.jsonio import to_json

FLOAT_DTYPES = ["double", "float", "mixed", "half"]


def _scaled_binary(ctx, compiled, inputs, factor: float) -> mnrt.LightBinary:
    """A binary of `compiled` with its last GEMM/convolution's output scaled by `factor`,
    checked against the goldens of the unmodified function's results."""
    q = ctx.queue
    compiled(inputs)
    names = goldens.checked_values(compiled)
    results = {n: q.enqueue_read_buffer(compiled.lowered.bindings[n]) for n in names}
    last = max(i for i, n in enumerate(compiled.graph.nodes) if n.op in MATRIX_OPS)
    wrong = goldens.scaled_copy(compiled, last, factor)
    mnrt.begin_capture()
    try:
        wrong(inputs)
        goldens.record_goldens(wrong, q, results)
    finally:
        binary = mnrt.end_capture()
    return binary


@pytest.mark.parametrize("float_dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_a_binary_passes_its_own_goldens_exactly_and_fails_a_gemm_one_percent_off(
    ctx, tmp_path, model, float_dtype
):
    """Before, goldens came from the float64 reference with rtol 3e-2 at mixed (a 1% error
    passed) and 1e-9 at double (a double binary failed its own goldens)."""
    builder, inputs = models.MODELS[model]()
    compiled = ctx.compile(builder, inputs, options={"float_dtype": float_dtype})
    compiled.save_binary(tmp_path / "own.mnlb")
    assert mnrt.replay(tmp_path / "own.mnlb").passed
    exact = mnrt.replay(tmp_path / "own.mnlb", rtol=0.0, atol=0.0)
    assert exact.passed, exact.summary()
    # Both models end in a softmax: its logits are checked too, or the scaled GEMM that
    # produces them would pass.
    assert [c.name for c in exact.checks][1:] == [compiled.graph.nodes[-1].inputs[0]]
    assert mnrt.replay(_scaled_binary(ctx, compiled, inputs, 1.0)).passed
    assert not mnrt.replay(_scaled_binary(ctx, compiled, inputs, 1.01)).passed


def test_the_tolerance_grows_with_depth_and_reduction_length():
    b = mnrt.compiler.GraphBuilder("deep")
    rng = np.random.default_rng(0)
    h = b.input("x", (4, 512), "float")
    depths = []
    for i in range(3):
        h = b.gemm(h, b.param(f"w{i}", rng.standard_normal((512, 512)).astype(np.float32)))
        depths.append(h)
    for i, v in enumerate(depths):
        b.output(v, f"y{i}")
    errors = goldens.value_errors(b.build())
    assert 0 < errors["y0"] < errors["y1"] < errors["y2"]
    assert errors["x"] == 0.0


def test_the_codegen_report_holds_the_accuracy_check(ctx, tmp_path):
    builder, inputs = models.MODELS["mlp"]()
    ctx.compile(builder, inputs, codegen_dir=tmp_path / "cg", options={"float_dtype": "mixed"})
    report = json.loads((tmp_path / "cg" / "report.json").read_text())
    (binary,) = [p for p in report["phases"] if p["name"] == "light binary"]
    check = binary["accuracy"]
    assert check["reference"] == "float64 graph" and check["float_dtype"] == "mixed"
    assert check["outputs"]["probs"]["passed"] and check["outputs"]["probs"]["max_abs_err"] > 0


def test_an_inaccurate_compile_warns_naming_the_output(ctx, tmp_path, monkeypatch):
    builder, inputs = models.MODELS["mlp"]()
    compiled = ctx.compile(builder, inputs, options={"float_dtype": "float"})
    reference = goldens.reference

    def off_by_ten_percent(compiled, feeds):
        source, outputs = reference(compiled, feeds)
        return source, {k: 1.1 * v for k, v in outputs.items()}

    monkeypatch.setattr(goldens, "reference", off_by_ten_percent)
    with pytest.warns(UserWarning, match=r"output 'probs' differs from the float64 graph"):
        compiled.save_binary(tmp_path / "m.mnlb")
    assert mnrt.replay(tmp_path / "m.mnlb").passed  # the binary reproduces what was compiled


def test_a_quantized_model_off_its_reference_is_told_why_not_to_raise_float_dtype(
    ctx, tmp_path, monkeypatch
):
    """A QDQ model's float rounding on the other side of a step's midpoint moves a value a
    whole step (torchvision's ResNet-18 quantized by onnxruntime: 0.063 in 439 of 1000
    logits): the warning said a higher float_dtype would be more accurate, which it is not."""
    onnx = onnx_module()
    nodes = [
        onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        onnx.helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    model = onnx_model(
        nodes,
        [value_info("x", [8])],
        [value_info("y", [8])],
        [initializer("s", np.float32(0.1)), initializer("z", np.uint8(128))],
    )
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    compiled = ctx.compile(model, {"x": x}, options={"float_dtype": "float"})
    assert goldens.quantizes(compiled.graph)
    reference = goldens.reference

    def one_step_off(compiled, feeds):
        source, outputs = reference(compiled, feeds)
        return source, {k: v + 0.1 for k, v in outputs.items()}

    monkeypatch.setattr(goldens, "reference", one_step_off)
    with pytest.warns(UserWarning, match=r"'y' differs.*the model quantizes values it computes"):
        compiled.save_binary(tmp_path / "q.mnlb")
    builder, inputs = models.MODELS["mlp"]()
    assert not goldens.quantizes(ctx.compile(builder, inputs).graph)


def _light_model(name: str):
    onnx = pytest.importorskip("onnx")
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    return onnx.load(str(path))


def test_a_light_model_binary_fails_with_its_last_gemm_one_percent_off(ctx, tmp_path):
    """ShuffleNet's weights are all 0.02, so its 1000 logits are equal and its softmax is
    uniform whatever they are: only the logits' own golden sees the GEMM's error."""
    pytest.importorskip("onnxruntime")
    model = _light_model("light_shufflenet")
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    inputs = {"gpu_0/data_0": x}
    compiled = ctx.compile(model, inputs, options={"float_dtype": "mixed"})
    compiled.save_binary(tmp_path / "own.mnlb")
    assert mnrt.replay(tmp_path / "own.mnlb").passed
    report = mnrt.replay(_scaled_binary(ctx, compiled, inputs, 1.01))
    assert [c.name for c in report.checks if not c.passed] == [compiled.graph.nodes[-1].inputs[0]]


def test_a_result_clipped_at_halfs_largest_magnitude_warns(ctx, tmp_path):
    """Half rounds overflow to its largest value: a 1% error upstream gives the same bits,
    which no golden can catch, so the compile says the result is clipped."""
    b = mnrt.compiler.GraphBuilder("big")
    x = b.input("x", (2, 64), "float")
    b.output(b.gemm(x, b.param("w", np.full((64, 4), 3e4, np.float32))), "y")
    inputs = {"x": np.full((2, 64), 3e4, np.float32)}
    compiled = ctx.compile(b, inputs, options={"float_dtype": "mixed"})
    with pytest.warns(UserWarning, match=r"'y' has 8 of 8 elements.* at half's largest"):
        compiled.save_binary(tmp_path / "big.mnlb")


def _content(path: Path) -> dict:
    """A binary's commands, blobs and lists, without what differs between two recordings
    of the same run (the time it was made, and the integrity hash that covers it)."""
    doc = to_json(LightBinary.load(path))
    del doc["metadata"], doc["integrity"]
    return doc


def _record(compiled, inputs: dict, path: Path, how: str) -> None:
    if how == "save_binary":
        compiled.save_binary(path)
        return
    mnrt.begin_capture(fingerprints=True)
    compiled(inputs)
    compiled(inputs)
    mnrt.end_capture().save(path)


@pytest.mark.parametrize("how", ["save_binary", "calls"])
@pytest.mark.parametrize("float_dtype", ["float", "mixed", "half"])
def test_a_capture_records_the_uploaded_weights_as_they_are_without_copying_them(
    ctx, tmp_path, monkeypatch, float_dtype, how
):
    """save_binary's capture, and a capture of the user's around two calls, record each
    parameter once, from the array it was uploaded from (compiled._weights_as_stored),
    not from a copy of the device memory: the binary holds the same bytes either way.
    (Copying made a capture of the light VGG-19's call twice as slow.)"""
    builder, inputs = models.MODELS["cnn"]()
    compiled = ctx.compile(builder, inputs, options={"float_dtype": float_dtype})
    vouched = type(compiled)._weights_as_stored
    used = []

    def counted(self):
        return {k: (buf, lambda f=f, buf=buf: used.append(buf) or f())
                for k, (buf, f) in vouched(self).items()}  # fmt: skip

    monkeypatch.setattr(type(compiled), "_weights_as_stored", counted)
    compiled(inputs)  # no capture: nothing asked
    assert used == []
    _record(compiled, inputs, tmp_path / "vouched.mnlb", how)
    assert sorted(map(id, used)) == sorted(
        id(compiled.lowered.bindings[n]) for n in compiled.graph.params
    )
    monkeypatch.setattr(type(compiled), "_weights_as_stored", lambda self: {})
    _record(compiled, inputs, tmp_path / "copied.mnlb", how)
    assert _content(tmp_path / "vouched.mnlb") == _content(tmp_path / "copied.mnlb")
    assert mnrt.replay(tmp_path / "vouched.mnlb", rtol=0, atol=0).passed


def test_a_registered_weight_changed_after_the_compile_is_recorded_as_it_is_now(ctx, tmp_path):
    """A registered value is its owner's to change: the binary records what its buffer
    holds when it is saved, not what the graph was compiled with."""
    builder, inputs = models.MODELS["mlp"]()
    compiled = ctx.compile(builder, inputs)
    name = next(n for n in compiled.graph.params if compiled.graph.values[n].shape)
    data = np.asarray(compiled.graph.values[name].data, np.float32)
    proxy = ctx.register_param(name, data)
    bound = ctx.compile(builder, inputs)
    assert name in bound.shared
    proxy.load_from(data * 2)
    bound.save_binary(tmp_path / "m.mnlb")
    doubled = np.ascontiguousarray(data * 2).tobytes()
    binary = LightBinary.load(tmp_path / "m.mnlb")
    assert any(bytes(binary.blobs.read(i)) == doubled for i in range(1, len(binary.blobs) + 1))


def _gemm_relu_model():
    helper = onnx_module().helper
    w = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = onnx_model(nodes, [value_info("x", [3, 8])], [value_info("y", [3, 4])],
                       [initializer("w", w)])  # fmt: skip
    return model, {"x": np.random.default_rng(4).standard_normal((3, 8)).astype(np.float32)}


def test_the_onnxruntime_reference_runs_beside_the_recording_and_gives_the_verdict(
    tmp_path, monkeypatch
):
    """The reference from onnxruntime runs on a thread of its own while the binary is
    recorded: the verdict is still onnxruntime's, and the binary the same as when the
    reference is computed first."""
    pytest.importorskip("onnxruntime")
    model, inputs = _gemm_relu_model()
    threads = []
    reference = goldens.reference

    def noted(compiled, feeds):
        threads.append(threading.current_thread())
        return reference(compiled, feeds)

    monkeypatch.setattr(goldens, "reference", noted)
    with mnrt.Context() as ctx:
        ctx.compile(model, inputs, codegen_dir=tmp_path / "beside")
    assert threads and threads[0] is not threading.main_thread()
    report = json.loads((tmp_path / "beside" / "report.json").read_text())
    (binary,) = [p for p in report["phases"] if p["name"] == "light binary"]
    assert binary["accuracy"]["reference"] == "onnxruntime"
    assert binary["accuracy"]["outputs"]["y"]["passed"]
    # Begun only once the capture has ended.
    monkeypatch.setattr(goldens.PendingReference, "start", lambda self: None)
    with mnrt.Context() as ctx:
        ctx.compile(model, inputs, codegen_dir=tmp_path / "after")
    assert _content(tmp_path / "beside" / "model.mnlb") == _content(
        tmp_path / "after" / "model.mnlb"
    )


def test_onnxruntime_reads_the_model_file_the_compile_read_while_it_is_unchanged(
    tmp_path, monkeypatch
):
    """A compile given a file has onnxruntime read that file (serialising the model first
    copied every weight: ViT-B/16, 346 MB and 5 s of its compile); a file replaced since
    (its size or time differ) is not what was compiled, so the compile's own model is
    serialised instead, and the verdict holds."""
    ort = pytest.importorskip("onnxruntime")
    onnx = onnx_module()
    model, inputs = _gemm_relu_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    loaded = []
    real = ort.InferenceSession

    def session(source, *args, **kwargs):
        loaded.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", session)
    with mnrt.Context() as ctx:
        compiled = ctx.compile(path, inputs)
        accuracy = compiled.save_binary_and_check(tmp_path / "a.mnlb")
        assert accuracy["reference"] == "onnxruntime" and accuracy["outputs"]["y"]["passed"]
        assert loaded == [str(path)]
        other = onnx.load(path)  # the weights negated: another model at the same path
        weights = onnx.numpy_helper.to_array(other.graph.initializer[0])
        other.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(-weights, "w"))
        onnx.save(other, path)
        os.utime(path, ns=(0, 0))
        accuracy = compiled.save_binary_and_check(tmp_path / "b.mnlb")
        assert accuracy["reference"] == "onnxruntime" and accuracy["outputs"]["y"]["passed"]
        assert isinstance(loaded[-1], bytes), accuracy


def test_a_model_onnxruntime_cannot_run_gets_the_float64_reference_outside_the_binary(
    tmp_path, monkeypatch
):
    """When onnxruntime turns the model down, the float64 graph runs on the device after
    the binary's capture has ended, not during it: the binary holds only the compiled run."""
    pytest.importorskip("onnxruntime")
    model, inputs = _gemm_relu_model()
    monkeypatch.setattr(goldens, "_onnxruntime", lambda *args: None)
    on_device = []
    float64 = goldens.apply_float_dtype

    def noted(graph, float_dtype):
        on_device.append(threading.current_thread())
        return float64(graph, float_dtype)

    monkeypatch.setattr(goldens, "apply_float_dtype", noted)
    with mnrt.Context() as ctx:
        ctx.compile(model, inputs, codegen_dir=tmp_path / "fallback")
    assert on_device == [threading.main_thread()]
    report = json.loads((tmp_path / "fallback" / "report.json").read_text())
    (binary,) = [p for p in report["phases"] if p["name"] == "light binary"]
    assert binary["accuracy"]["reference"] == "float64 graph"
    monkeypatch.setattr(goldens, "_onnxruntime_for", lambda compiled: None)
    with mnrt.Context() as ctx:
        ctx.compile(model, inputs, codegen_dir=tmp_path / "no-ort")
    assert _content(tmp_path / "fallback" / "model.mnlb") == _content(
        tmp_path / "no-ort" / "model.mnlb"
    )
    assert mnrt.replay(tmp_path / "fallback" / "model.mnlb", rtol=0, atol=0).passed
