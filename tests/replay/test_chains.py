"""Chains in light binaries: a program with a `chain` kernel (written by hand, or by the
compiler's fuse_chains) survives the round trip, replays, is fingerprinted and located as
one kernel, and a hostile chain is refused with a one-line error."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_harness import assert_one_line_error, invoke_cli
from hostile import edited

import mnrt
from mnrt.compiler.models import MODELS
from mnrt.device.kernels import chain
from mnrt.replay.plan import validate

STEPS = chain.dumps(
    [
        {"op": "cast", "attrs": {"to": "float"}},
        {"op": "softmax"},
        {"op": "cast", "attrs": {"to": "half"}},
    ]
)


def _chain_capture() -> mnrt.LightBinary:
    rng = np.random.default_rng(1)
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=True)
        x = dev.create_buffer((3, 8), "half", name="x")
        y = dev.create_buffer((3, 8), "half", name="y")
        kernel = mnrt.Kernel("chain", ["x"], ["y"], {"steps": STEPS, "x_dtype": "half"})
        q.enqueue_write_buffer(x, rng.standard_normal((3, 8)).astype(np.float32))
        q.enqueue_program(dev.create_program([kernel], name="tail"), {"x": x, "y": y})
        q.enqueue_read_buffer(y)
        return mnrt.end_capture()


def test_a_chain_survives_save_and_load_and_replays(tmp_path):
    _chain_capture().save(tmp_path / "chain.mnlb")
    loaded = mnrt.LightBinary.load(tmp_path / "chain.mnlb")
    report = mnrt.replay(loaded, locate=True)
    assert report.passed and report.locate.compared == 1 and report.locate.divergent == 0


def _with_steps(binary: mnrt.LightBinary, steps: str, x_dtype: str = "half"):
    def edit(doc: dict) -> None:
        for c in doc["commands"]:
            if c["cmd"]["type"] == "CreateProgram":
                attrs = c["cmd"]["program"]["kernels"][0]["attrs"]
                strings = {"steps": steps, "x_dtype": x_dtype}
                for a in attrs:
                    if a["name"] in strings:
                        a["s"] = strings[a["name"]]

    return edited(binary, edit)


HOSTILE = {
    "unknown op": ('[{"op":"nope"}]', "half", "unknown kernel 'nope'"),
    "nested chain": ('[{"op":"chain"}]', "half", "cannot hold a chain"),
    "matrix op": ('[{"op":"relu"},{"op":"gemm","with":[0]}]', "half", "operands in order, not x"),
    "two matrix ops": ('[{"op":"gemm","with":[1]},{"op":"gemm","with":[2]}]', "half", "one matrix"),
    "operand not given": ('[{"op":"mul"}]', "half", "this step gives it 1"),
    "operand not there": ('[{"op":"mul","with":[1]}]', "half", "the chain has 1 inputs"),
    "bad with": ('[{"op":"mul","with":["a"]}]', "half", "must be an integer from 0"),
    "bad at": ('[{"op":"mul","with":[0],"at":2}]', "half", "'at' must be an integer from 0 to 1"),
    "bad attrs": ('[{"op":"softmax","attrs":{"axis":"x"}}]', "half", "must be int"),
    "absurd length": (json.dumps([{"op": "relu"}] * 1000), "half", "1 to 64 steps"),
    "deep nesting": ("[" * 60_000, "half", "nests too deeply"),
    "too long": ("[" * 70_000, "half", "characters long"),
    "wrong input dtype": ('[{"op":"softmax"}]', "float", "made for a float input"),
    "wrong output dtype": (
        '[{"op":"cast","attrs":{"to":"float"}},{"op":"softmax"}]',
        "half",
        "is bound to a half[3, 8]; the kernel produces float[3, 8]",
    ),
    "wrong shape": ('[{"op":"reshape","attrs":{"shape":[4,6]}}]', "half", "produces half[4, 6]"),
    "absurd size": (
        '[{"op":"expand","attrs":{"shape":[65536,65536,3,8]}},{"op":"sum","attrs":{"axes":[0,1]}}]',
        "half",
        "emulator's limit",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_chains_are_refused_before_replay(case, tmp_path):
    steps, x_dtype, message = HOSTILE[case]
    bad = _with_steps(_chain_capture(), steps, x_dtype)
    with pytest.raises(mnrt.InvalidBinaryError) as e:
        validate(bad)
    assert message in str(e.value) and "chain" in str(e.value)
    bad.save(tmp_path / "bad.mnlb")
    assert_one_line_error(*invoke_cli("run", tmp_path / "bad.mnlb"), "chain")


@pytest.fixture(scope="module")
def cnn_binary(tmp_path_factory):
    """The bundled CNN compiled at O3 (chains fused) and saved with fingerprints."""
    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    model, x = MODELS["cnn"]()
    compiled = ctx.compile(model, x, options={"option_json": "O3", "float_dtype": "mixed"})
    path = tmp_path_factory.mktemp("cnn") / "cnn.mnlb"
    compiled.save_binary(path)
    return compiled, path


def test_a_compiled_cnn_with_chains_passes_mnrt_run_and_locates_per_chain(cnn_binary, tmp_path):
    compiled, path = cnn_binary
    ops = [n.op for n in compiled.graph.nodes]
    assert ops == ["chain", "chain", "conv2d", "chain", "gemm", "chain"]  # the input's cast:
    # the first conv's prologue
    code, out = invoke_cli("run", path)
    assert code == 0, out
    binary = mnrt.LightBinary.load(path)
    fingerprinted = {f.kernel for f in binary.fingerprints}
    assert fingerprinted == set(range(len(ops)))  # one per kernel: a chain is one
    report = mnrt.replay(binary, locate=True)
    assert report.passed and report.locate.divergent == 0
    assert report.locate.compared == len(binary.fingerprints)
    code, out = invoke_cli("run", path, "--locate", "--locate-dir", tmp_path / "loc")
    assert code == 0, out


def test_locate_names_a_chain_whose_step_computes_wrongly(cnn_binary, tmp_path, monkeypatch):
    import dataclasses

    from mnrt.device.kernels import registry

    _, path = cnn_binary
    pool = registry.lookup("global_avg_pool2d")
    broken = dataclasses.replace(
        pool, compute=lambda ins, attrs, outs: [ins[0].mean(axis=(2, 3), keepdims=True) * 2]
    )
    monkeypatch.setitem(registry._REGISTRY, "global_avg_pool2d", broken)
    report = mnrt.replay(mnrt.LightBinary.load(path), locate_dir=tmp_path)
    site = report.locate.first_wrong
    assert site.op == "chain" and site.kernel == 3 and not report.passed
    folder = tmp_path / f"command{site.command}_kernel3_chain"
    saved = json.loads((folder / "site.json").read_text())
    assert saved["op"] == "chain"
    # The float64 reference runs the chain's steps (the broken pool among them, as the
    # registry holds it now): it agrees with what the replay computed, not the capture.
    assert saved["reference"] == "the kernel evaluated in float64 on the saved inputs"
    (replayed,) = folder.glob("output.*.replayed.npy")
    reference = np.load(str(replayed).replace(".replayed.", ".reference."))
    np.testing.assert_allclose(reference, np.load(replayed), rtol=1e-2, atol=1e-3)


def test_locate_names_the_chain_that_takes_a_perturbed_batch_norm_scale(tmp_path):
    """A pre-activation block at O3: BatchNorm's scale and shift are operands of the chain
    that runs mul, add and relu as the conv's prologue. Perturbing either (or the input, or
    the conv's weight), `--locate` names it and saves all four of its inputs, and the
    float64 reference of the chain on them."""
    from binaries import perturbed, preact_block, weight_sites

    b, inputs = preact_block((1, 4, 6, 6), residual=False)
    with mnrt.Context() as ctx:
        compiled = ctx.compile(b, inputs, options={"option_json": "O3", "float_dtype": "float"})
        assert [n.op for n in compiled.graph.nodes] == ["chain"]
        compiled.save_binary(tmp_path / "pre.mnlb")
    binary = mnrt.LightBinary.load(tmp_path / "pre.mnlb")
    chains = [site for site in weight_sites(binary) if site[1] == 0]
    assert len(chains) == 4  # the model's input, the scale, the shift and the conv's weight
    for command, _, gid in chains:
        report = mnrt.replay(perturbed(binary, gid), locate_dir=tmp_path / str(gid))
        site = report.locate.first_wrong
        assert (site.command, site.kernel, site.op) == (command, 0, "chain") and not report.passed
        (folder,) = (tmp_path / str(gid)).iterdir()
        assert len(list(folder.glob("input*.npy"))) == 4
        (replayed,) = folder.glob("output.*.replayed.npy")
        reference = np.load(str(replayed).replace(".replayed.", ".reference."))
        np.testing.assert_allclose(reference, np.load(replayed), rtol=1e-5, atol=1e-6)


def test_mnrt_compile_explain_at_o3_with_chains(tmp_path):
    pytest.importorskip("onnx")
    from mnrt.compiler import onnx_export

    model, x = MODELS["cnn"]()
    onnx_export.save(model.build(), tmp_path / "cnn.onnx")
    np.save(tmp_path / "image.npy", x["image"])
    code, out = invoke_cli(
        "compile", tmp_path / "cnn.onnx", "-o", tmp_path / "cnn.mnlb", "-O", "O3",
        "--input", f"image={tmp_path / 'image.npy'}", "--explain", "--codegen-dir", tmp_path / "cg",
    )  # fmt: skip
    assert code == 0, out
    assert "conv2d0 (chain with conv2d):" in out and "6 kernels" in out
    l3ir = (tmp_path / "cg" / "l3ir.txt").read_text()
    assert l3ir.count("= chain(") == 4
    assert '{"op":"max_pool2d","attrs":{"kernel":[2,2],"stride":[2,2]}}' in l3ir
    assert invoke_cli("run", tmp_path / "cnn.mnlb")[0] == 0
