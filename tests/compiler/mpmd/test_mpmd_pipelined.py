"""Pipelined compiles run: the result equals the single-device one, the compile exposes its
fragments and transfers, writes the IR after every pass, and a captured run replays."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
from binaries import perturbed, weight_sites
from graph_harness import on_chip_at_each_node
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler.models import encoder_stack, mlp, transformer_block
from mnrt.compiler.mpmd import parse
from mnrt.compiler.mpmd.compiled import COMPUTE
from mnrt.compiler.mpmd.cost import program_cost
from mnrt.compiler.placement import on_chip_bytes
from mnrt.errors import InvalidArgumentError
from mnrt.format import LightBinary
from mnrt.format.edit import Editor
from mnrt.format.fb.CommandUnion import CommandUnion
from mnrt.format.jsonio import to_json
from mnrt.replay import replay
from mnrt.replay.diff import diff
from mnrt.replay.hazards import races
from mnrt.replay.info import info
from mnrt.replay.plan import validate


def _microbatches(inputs, m, seed=1):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal((m, *v.shape)).astype(v.dtype) for k, v in inputs.items()}


def _single(ctx, builder, inputs, stacked):
    """Each microbatch through the single-device compile of the same model."""
    single = ctx.compile(builder, inputs)
    m = len(next(iter(stacked.values())))
    runs = [  # each read before the next call overwrites the output buffers
        {n: p.cpu() for n, p in single({k: v[i] for k, v in stacked.items()}).items()}
        for i in range(m)
    ]
    return {name: np.stack([r[name] for r in runs]) for name in single.output_names}


@pytest.mark.parametrize(
    "model, mpmd",
    [
        (mlp, {"devices": [0, 1], "microbatches": 3}),
        (transformer_block, {"devices": [0, 1, 2, 3], "microbatches": 8}),
        (
            transformer_block,
            {"devices": [0, 1], "stages": 4, "schedule": "circular", "microbatches": 5},
        ),
        (mlp, {"devices": [2], "microbatches": 2}),
    ],
)
def test_pipelined_result_equals_the_single_device_one(ctx, model, mpmd):
    builder, inputs = model()
    stacked = _microbatches(inputs, mpmd["microbatches"])
    compiled = ctx.compile(builder, inputs, options={"mpmd": mpmd})
    got = compiled(stacked)
    want = _single(ctx, builder, inputs, stacked)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-5)
        # as a single-device function's outputs answer it (it was an AttributeError)
        kept = got[name].cpu()
        assert type(kept) is np.ndarray and np.array_equal(kept, got[name])
    assert {f.device for f in compiled.fragments} == set(mpmd["devices"])
    stages = mpmd.get("stages", len(mpmd["devices"]))
    assert sorted(f.stage for f in compiled.fragments) == list(range(stages))
    assert all(t.src != t.dst for t in compiled.transfers)
    compiled.close()


def _random_chain(draw_layers, width):
    """A residual chain of named layers: each gemm (+ relu or gelu), some adding the input
    of the layer back."""
    rng = np.random.default_rng(len(draw_layers))
    b = GraphBuilder("chain")
    h = b.input("x", (4, width))
    for i, (act, residual) in enumerate(draw_layers):
        with b.scope(f"l{i}"):
            w = b.param(f"w{i}", (rng.standard_normal((width, width)) / width).astype(np.float32))
            y = b.node(act, b.gemm(h, w))
            h = b.add(h, y) if residual else y
    b.output(b.softmax(h), "y")
    return b, {"x": rng.standard_normal((4, width)).astype(np.float32)}


@settings(max_examples=12, deadline=None)
@given(
    layers=st.lists(
        st.tuples(st.sampled_from(["relu", "gelu", "tanh"]), st.booleans()), min_size=2, max_size=6
    ),
    devices=st.integers(1, 3),
    circular=st.booleans(),
    assign=st.booleans(),
    m=st.integers(1, 4),
)
def test_any_pipeline_of_a_chain_computes_what_one_device_does(
    layers, devices, circular, assign, m
):
    builder, inputs = _random_chain(layers, 8)
    v = 2 if circular and len(layers) >= 2 * devices else 1
    stages = devices * v
    if len(layers) < stages:
        return
    mpmd = {
        "devices": list(range(devices)),
        "stages": stages,
        "microbatches": m,
        "schedule": "circular" if v > 1 else "gpipe",
    }
    options = {"mpmd": mpmd}
    if assign:  # contiguous layers per stage; the softmax is left to use sets
        options["stage_assignment"] = {
            f"l{i}/": i * stages // len(layers) for i in range(len(layers))
        }
    stacked = _microbatches(inputs, m)
    with mnrt.Context() as ctx:
        got = ctx.compile(builder, inputs, options=options)(stacked)
        want = _single(ctx, builder, inputs, stacked)
    np.testing.assert_allclose(got["y"], want["y"], rtol=0, atol=1e-5)


def test_stage_assignment_puts_each_layer_in_its_stage(ctx):
    builder, inputs = encoder_stack(layers=4, seq=8, dim=16, heads=2)
    assignment = {"layer0/": 0, "layer1/": 0, "layer2/": 1, "layer3/": 1}
    compiled = ctx.compile(
        builder,
        inputs,
        options={"mpmd": {"devices": [0, 1], "microbatches": 2}, "stage_assignment": assignment},
    )
    first, second = compiled.fragments
    assert (first.stage, first.device, first.origin) == (0, 0, ("layer0/", "layer1/"))
    assert (second.stage, second.device) == (1, 1)
    assert second.origin == ("layer2/", "layer3/")
    assert all(n.name.startswith(("layer0/", "layer1/")) for n in first.ops)
    # The final LayerNorm belongs to no layer: its use set puts it with layer 3.
    assert second.ops[-1].name == "layernorm88"
    assert [(t.src, t.dst) for t in compiled.transfers] == [(0, 1)]
    compiled.close()


def test_codegen_dir_holds_the_ir_after_each_pass_and_a_replayable_binary(ctx, tmp_path):
    builder, inputs = transformer_block(seq=8, dim=16, heads=2)
    mpmd = {"devices": [0, 1], "microbatches": 3}
    compiled = ctx.compile(builder, inputs, codegen_dir=tmp_path, options={"mpmd": mpmd})
    files = sorted(p.name for p in (tmp_path / "mpmd").iterdir())
    assert files[0] == "00_import.txt" and files[-1] == "11_verify-stage-merging.txt"
    assert [name for name, _ in compiled.passes][1:] == [f[3:-4] for f in files[1:]]
    for f in files:  # every stage of the IR parses back and is well formed
        parse((tmp_path / "mpmd" / f).read_text()).verify()
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["mpmd"]["devices"] == [0, 1]
    assert set(doc["modelled"]) == {
        "makespan_s", "energy_j", "idle_energy_j", "bubble_fraction", "devices"
    }  # fmt: skip
    assert [f["stage"] for f in doc["fragments"]] == [0, 1]
    report = replay(tmp_path / "model.mnlb", locate=True)
    assert report.passed and len(report.checks) == 3
    binary = LightBinary.load(tmp_path / "model.mnlb")
    assert report.locate.compared == len(binary.fingerprints) > 0  # every device's kernels
    assert report.locate.divergent == 0
    command, kernel, gid = weight_sites(binary)[0]
    located = replay(perturbed(binary, gid), locate=True).locate.first_divergent
    assert (located.command, located.kernel) == (command, kernel)
    # loaded back without compiling: the same stages, the same outputs, an equal binary
    stacked = _microbatches(inputs, 3)
    want = compiled(stacked)["y"]
    compiled.close()
    loaded = ctx.load_codegen_dir(tmp_path)
    assert [(f.stage, f.device) for f in loaded.fragments] == [(0, 0), (1, 1)]
    loaded.save_binary(tmp_path / "loaded.mnlb")
    assert diff(binary, LightBinary.load(tmp_path / "loaded.mnlb"))["equal"]
    np.testing.assert_array_equal(loaded(stacked)["y"], want)
    loaded.close()
    (tmp_path / "graph.json").unlink()  # as an earlier mnrt wrote it
    with pytest.raises(InvalidArgumentError, match="pipelined .* of an earlier mnrt"):
        ctx.load_codegen_dir(tmp_path)
    counts = info(LightBinary.load(tmp_path / "model.mnlb"))["commands_by_type"]
    assert counts["CopyBuffer"] == 3 * len(compiled.transfers)
    assert counts["OpenDevice"] == 2 and counts["WaitEvent"] > 0


def test_a_compile_on_every_microbatchs_input_records_that_run(ctx, tmp_path):
    """Inputs with a leading microbatch axis, as a pipelined call takes them: the first is
    the compile's example, and the run save_binary records (the codegen_dir's model.mnlb
    too, and a save_binary of the codegen_dir loaded back) is on all of them; its goldens
    are each microbatch's outputs of the single-device compile; a binary saved after a call
    is the one saved before it. save_binary takes its inputs either way too. A wrong count
    is refused."""
    builder, inputs = mlp()
    stacked = _microbatches(inputs, 3)
    mpmd = {"devices": [0, 1], "microbatches": 3}
    compiled = ctx.compile(builder, stacked, codegen_dir=tmp_path, options={"mpmd": mpmd})
    np.testing.assert_array_equal(compiled.example_inputs["x"], stacked["x"])
    want = _single(ctx, builder, inputs, stacked)
    compiled(_microbatches(inputs, 3, seed=2))
    compiled.save_binary(tmp_path / "m.mnlb")
    report = replay(tmp_path / "model.mnlb", rtol=0, atol=0)
    assert report.passed
    for m in range(3):
        got = report.outputs[f"probs#{m}"]
        np.testing.assert_allclose(got, want["probs"][m], rtol=0, atol=1e-5)
    assert not np.array_equal(report.outputs["probs#0"], report.outputs["probs#1"])
    binary = LightBinary.load(tmp_path / "model.mnlb")
    assert diff(binary, LightBinary.load(tmp_path / "m.mnlb"))["equal"]
    # save_binary takes inputs as the compile does: one microbatch's example repeats
    compiled.save_binary(tmp_path / "one.mnlb", inputs)
    compiled.save_binary(tmp_path / "all.mnlb", {k: np.stack([v] * 3) for k, v in inputs.items()})
    one, every = (LightBinary.load(tmp_path / f"{n}.mnlb") for n in ("one", "all"))
    assert diff(one, every)["equal"] and not diff(one, binary)["equal"]
    compiled.close()
    loaded = ctx.load_codegen_dir(tmp_path)
    loaded.save_binary(tmp_path / "loaded.mnlb")
    assert diff(binary, LightBinary.load(tmp_path / "loaded.mnlb"))["equal"]
    loaded.close()
    # as the last mnrt wrote it: one microbatch's example
    np.savez(tmp_path / "inputs.npz", **{k: v[0] for k, v in stacked.items()})
    with pytest.raises(InvalidArgumentError, match="inputs.npz .*; compile the model into it"):
        ctx.load_codegen_dir(tmp_path)
    with pytest.raises(mnrt.ShapeError, match="holds 3 microbatches .* the pipeline runs 2"):
        ctx.compile(builder, stacked, options={"mpmd": {"devices": [0, 1]}})


def test_a_codegen_dir_compiled_into_again_is_what_the_last_compile_wrote(ctx, tmp_path):
    """A single-device compile into a pipelined compile's codegen_dir (and back): the folder
    loads as the last compile made it (option.json says which), and the MPMD IR files of
    the pipelined one are gone with it, while a file of the user's there stays."""
    from mnrt.compiler.compiled import CompiledFunction
    from mnrt.compiler.mpmd.compiled import PipelinedFunction

    builder, inputs = mlp()
    pipelined = {"mpmd": {"devices": [0, 1]}}
    ctx.compile(builder, inputs, codegen_dir=tmp_path, options=pipelined).close()
    ctx.compile(builder, inputs, codegen_dir=tmp_path)
    assert not (tmp_path / "mpmd").exists()
    assert isinstance(ctx.load_codegen_dir(tmp_path), CompiledFunction)
    ctx.compile(builder, inputs, codegen_dir=tmp_path, options=pipelined).close()
    (tmp_path / "mpmd" / "notes.txt").write_text("mine")
    loaded = ctx.load_codegen_dir(tmp_path)
    assert isinstance(loaded, PipelinedFunction)
    loaded.close()
    ctx.compile(builder, inputs, codegen_dir=tmp_path)
    assert [p.name for p in (tmp_path / "mpmd").iterdir()] == ["notes.txt"]
    assert isinstance(ctx.load_codegen_dir(tmp_path), CompiledFunction)


def test_program_cost_is_what_the_device_prices(ctx):
    builder, inputs = mlp()
    compiled = ctx.compile(builder, inputs, options={"mpmd": {"devices": [0, 1]}})
    compiled(_microbatches(inputs, 2))
    for fragment in compiled.fragments:
        lowered = compiled.lowered[fragment.name]
        q = compiled.queue(fragment.device, COMPUTE)
        ran = [c for c in q.history if c.kind == "program"][-1]
        want = program_cost(lowered.program, lowered.bindings)
        assert ran.modelled.time_s == pytest.approx(want.time_s, rel=1e-12)
        assert ran.modelled.energy_j == pytest.approx(want.energy_j, rel=1e-12)
    compiled.close()


@pytest.mark.parametrize("scheduler", ["always_from_dram", "spill_opt"])
def test_fragments_keep_the_schedulers_placement(ctx, scheduler):
    """Values inside a fragment stay where the scheduler put them (O0's always_from_dram
    keeps nothing on chip); values crossing fragments are in DRAM."""
    builder, inputs = transformer_block()
    options = {"mpmd": {"devices": [0, 1]}, "scheduler": scheduler}
    compiled = ctx.compile(builder, inputs, options=options)
    onchip = 0
    for fragment in compiled.fragments:
        graph = compiled.lowered[fragment.name].graph
        for name in (*fragment.inputs, *fragment.outputs):
            assert graph.values[name].location == "dram"
        onchip += sum(v.location == "lm" for v in graph.values.values())
    assert (onchip > 0) == (scheduler == "spill_opt")
    compiled.close()


@pytest.mark.parametrize("budget", [0, 1 << 12])
def test_a_fragments_chains_get_the_local_memory_its_placement_leaves(ctx, budget):
    builder, inputs = transformer_block()
    options = {"mpmd": {"devices": [0, 1]}, "option_json": "O3", "sram_budget": budget}
    compiled = ctx.compile(builder, inputs, options=options)
    chains = 0
    for fragment in compiled.fragments:
        graph = compiled.lowered[fragment.name].graph
        live = on_chip_at_each_node(graph)
        for i, node in enumerate(graph.nodes):
            if node.op == "chain":
                chains += 1
                assert node.attrs["lm_room"] == max(0, (budget or on_chip_bytes()) - live[i])
    assert chains
    compiled.close()


def test_pipelined_call_and_compile_errors(ctx, tmp_path):
    builder, inputs = mlp()
    compiled = ctx.compile(builder, inputs, options={"mpmd": {"devices": [0, 1]}})
    with pytest.raises(InvalidArgumentError, match=r"leading microbatch axis: \(2, 32, 64\)"):
        compiled(inputs)
    with pytest.raises(InvalidArgumentError, match="missing: x"):
        compiled({})
    ints = {"x": np.zeros((2, 32, 64), np.int64)}  # was the queue's DTypeError, naming x#0
    for call in (compiled, lambda i: compiled.save_binary(tmp_path / "m.mnlb", i)):
        with pytest.raises(InvalidArgumentError, match="input 'x' is int64, the model takes"):
            call(ints)
        with pytest.raises(InvalidArgumentError, match="input 'x' is not an array"):
            call({"x": [[1.0, 2.0], [3.0]]})  # ragged: was numpy's ValueError
    compiled.close()
    with pytest.raises(InvalidArgumentError, match="no backward pass"):
        ctx.compile(builder, inputs, options={"mpmd": {"devices": [0, 1], "schedule": "1f1b"}})
    with pytest.raises(InvalidArgumentError, match="expected a dict"):
        ctx.compile(builder, inputs, options={"mpmd": [0, 1]})


def test_mpmd_option_as_json_text_and_in_an_option_json_file(ctx, tmp_path):
    builder, inputs = mlp()
    path = tmp_path / "opts.json"
    path.write_text(json.dumps({"args": ['--mpmd={"devices": [0, 1], "microbatches": 2}']}))
    compiled = ctx.compile(builder, inputs, options={"option_json": str(path)})
    assert compiled.mpmd.microbatches == 2 and len(compiled.fragments) == 2
    assert compiled.options.to_json()["args"][-2].startswith("--mpmd={")
    compiled.close()


def test_closing_the_context_closes_the_pipelines_devices():
    builder, inputs = mlp()
    with mnrt.Context(mnrt.MNDevice("mncore2:0")) as ctx:
        ctx.compile(builder, inputs, options={"mpmd": {"devices": [0, 1]}})
    mnrt.open_device(1).close()  # free again


def test_a_device_that_will_not_open_leaves_none_open(ctx):
    builder, inputs = mlp()
    with pytest.raises(mnrt.DeviceNotFoundError, match="no emulated device 99"):
        ctx.compile(builder, inputs, options={"mpmd": {"devices": [1, 2, 99]}})
    for index in (1, 2):
        mnrt.open_device(index).close()  # released, so free again


def test_codegen_dir_during_a_users_capture_leaves_the_binary_out(ctx, tmp_path):
    builder, inputs = mlp()
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "model.mnlb").write_bytes(b"an older compile's")
    mnrt.begin_capture()
    try:
        ctx.compile(builder, inputs, codegen_dir=tmp_path / "cg",
                    options={"mpmd": {"devices": [0, 1]}})  # fmt: skip
    finally:
        mnrt.end_capture()
    assert not (tmp_path / "cg" / "model.mnlb").exists()
    phases = json.loads((tmp_path / "cg" / "report.json").read_text())["phases"]
    assert [p["name"] for p in phases[-2:]] == ["light binary", "onnx export"]
    assert phases[-2]["status"].startswith("skipped: ") and phases[-1]["status"] == "ok"


def test_an_input_returned_as_is_comes_back_as_its_own_copy(ctx, tmp_path):
    b = GraphBuilder("g")
    x = b.input("x", (4, 4))
    b.output(b.neg(b.relu(x)), "y")
    b.output(x)
    compiled = ctx.compile(b, {"x": np.ones((4, 4), np.float32)},
                           options={"mpmd": {"devices": [0, 1], "microbatches": 2}})  # fmt: skip
    assert compiled.program.outputs[1] != "x"  # uniquify-function-inputs-outputs' copy
    xs = np.arange(32, dtype=np.float32).reshape(2, 4, 4) - 10
    out = compiled({"x": xs})
    assert list(out) == ["y", "x"] == compiled.output_names
    np.testing.assert_array_equal(out["x"], xs)
    np.testing.assert_array_equal(out["y"], -np.maximum(xs, 0))
    compiled.save_binary(tmp_path / "g.mnlb")
    report = replay(tmp_path / "g.mnlb")
    assert report.passed and {c.name for c in report.checks} >= {"x#0", "y#1"}
    compiled.close()


def test_an_unwritable_codegen_dir_leaves_no_device_open(ctx, tmp_path):
    builder, inputs = mlp()
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(InvalidArgumentError, match="codegen_dir"):
        ctx.compile(builder, inputs, codegen_dir=tmp_path / "file",
                    options={"mpmd": {"devices": [0, 1]}})  # fmt: skip
    mnrt.open_device(1).close()  # released, so free again


def test_a_pipelined_function_frees_its_memory_on_the_contexts_device(ctx):
    builder, inputs = mlp()
    own = ctx.device.index
    mpmd = {"devices": [own, (own + 1) % 8], "microbatches": 2}
    used = ctx.device.memory_info()["used_bytes"]
    compiled = ctx.compile(builder, inputs, options={"mpmd": mpmd})
    compiled(_microbatches(inputs, 2))
    assert ctx.device.memory_info()["used_bytes"] > used
    compiled.close()
    assert ctx.device.memory_info()["used_bytes"] == used and ctx.device.is_open
    dropped = ctx.compile(builder, inputs, options={"mpmd": mpmd})
    dropped(_microbatches(inputs, 2))
    dropped = None
    gc.collect()
    ctx.compile(builder, inputs).close()  # the next compile frees what it left
    assert ctx.device.memory_info()["used_bytes"] == used


def test_pipelined_functions_of_one_context_share_its_other_devices(ctx):
    """One model at two presets, both held (to compare them): the second compile was
    refused, "device 1 is already open in this process", as each function opened the
    devices besides the context's for itself. They share them now, as every function
    shares the context's own; each frees its memory there, and a device closes with the
    last function using it (found compiling torchvision models one after another)."""
    builder, inputs = mlp()
    other = (ctx.device.index + 1) % 8
    mpmd = {"devices": [ctx.device.index, other], "microbatches": 2}
    stacked = _microbatches(inputs, 2)
    first = ctx.compile(builder, inputs, options={"mpmd": mpmd})
    second = ctx.compile(
        builder, inputs, options={"mpmd": mpmd, "option_json": "O3", "float_dtype": "float"}
    )
    device = first.devices[other]
    assert second.devices[other] is device
    used = device.memory_info()["used_bytes"]
    np.testing.assert_allclose(first(stacked)["probs"], second(stacked)["probs"], rtol=1e-5)
    first.close()
    assert device.is_open and device.memory_info()["used_bytes"] < used
    assert second(stacked)["probs"].shape[0] == 2  # still runs on the shared device
    second = None
    gc.collect()
    assert not device.is_open
    mnrt.open_device(other).close()  # free again
    third = ctx.compile(builder, inputs, options={"mpmd": mpmd})  # opened anew
    assert third.devices[other].is_open
    third.close()


def _recorded(path) -> dict:
    """A binary's commands, blobs and lists, without its time and integrity hash."""
    doc = to_json(LightBinary.load(path))
    del doc["metadata"], doc["integrity"]
    return doc


@pytest.mark.parametrize("user", [False, True])  # save_binary's capture, or the user's
def test_a_pipelined_capture_records_the_weights_without_copying_them(ctx, tmp_path, user):
    """As a single-device function's do: from the arrays they were uploaded from, on every
    device (the same bytes as a copy out of device memory)."""
    builder, inputs = mlp()
    mpmd = {"devices": [ctx.device.index, (ctx.device.index + 1) % 8], "microbatches": 2}
    compiled = ctx.compile(builder, inputs, options={"mpmd": mpmd})
    weights, used = compiled._weights, []
    compiled._weights = {k: (buf, lambda f=f, buf=buf: used.append(buf) or f())
                         for k, (buf, f) in weights.items()}  # fmt: skip
    stacked = _microbatches(inputs, 2)
    compiled(stacked)  # its queues open on first use: each recording then sees the same

    def record(path):
        if not user:
            return compiled.save_binary(path, stacked)
        mnrt.begin_capture()
        compiled(stacked)
        mnrt.end_capture().save(path)

    record(tmp_path / "vouched.mnlb")
    assert len(used) == len(weights) > 0
    assert len({buf.device.index for buf in used}) == 2
    compiled._weights = {}
    record(tmp_path / "copied.mnlb")
    assert _recorded(tmp_path / "vouched.mnlb") == _recorded(tmp_path / "copied.mnlb")
    assert replay(tmp_path / "vouched.mnlb", rtol=0.0, atol=0.0).passed
    compiled.close()


def test_a_pipelined_binary_replays_its_capture_bit_for_bit(ctx, tmp_path):
    """As a single-device compile's binary does on the machine that made it (`mnrt run
    --rtol 0 --atol 0`, and --locate finds no kernel that rounded differently): the capture
    runs its products with the BLAS threads the replay gives them. Products this large run
    on several BLAS threads when a process has them, and round differently on fewer."""
    builder, inputs = mlp(batch=256)
    mpmd = {"devices": [ctx.device.index, (ctx.device.index + 1) % 8], "microbatches": 2}
    compiled = ctx.compile(builder, inputs, options={"mpmd": mpmd})
    compiled.save_binary(tmp_path / "p.mnlb")
    compiled.close()
    report = replay(tmp_path / "p.mnlb", rtol=0.0, atol=0.0, locate=True)
    assert report.passed, report.summary()
    assert report.locate.compared > 0 and report.locate.divergent == 0, report.locate.summary()


@pytest.mark.parametrize(
    "mpmd",
    [
        {"devices": [0, 1, 2, 3], "microbatches": 8},
        {"devices": [0, 1], "stages": 4, "schedule": "circular", "microbatches": 5},
    ],
)
def test_a_pipelined_binarys_queues_never_race(ctx, tmp_path, mpmd):
    """Every value that crosses devices, and every buffer a later microbatch writes again,
    is ordered by the events the pipeline records (replay/hazards.py finds no pair of
    commands of two queues that touch one buffer unordered)."""
    builder, inputs = transformer_block()
    compiled = ctx.compile(builder, inputs, options={"mpmd": mpmd})
    compiled.save_binary(tmp_path / "p.mnlb")
    compiled.close()
    binary = LightBinary.load(tmp_path / "p.mnlb")
    plan = validate(binary, blobs=False)
    assert races(plan) == []
    waits = [c for c in binary.commands if c.cmdType == CommandUnion.WaitEvent]
    unordered = Editor(binary).build([c for c in binary.commands if c not in waits])
    assert waits and races(validate(unordered, blobs=False))  # the events are what orders it


def test_a_pipelined_binary_is_checked_against_the_reference_per_microbatch(ctx, tmp_path):
    """As a single-device compile's is: each microbatch's outputs against the model's
    reference on its inputs, a miss warned with the name its golden has."""
    builder, inputs = mlp()
    mpmd = {"devices": [ctx.device.index, (ctx.device.index + 1) % 8], "microbatches": 2}
    compiled = ctx.compile(builder, inputs, options={"mpmd": mpmd})
    stacked = _microbatches(inputs, 2)
    record = compiled.save_binary_and_check(tmp_path / "p.mnlb", stacked)
    assert record["reference"] == "float64 graph" and record["float_dtype"] == "float"
    assert sorted(record["outputs"]) == ["probs#0", "probs#1"]
    assert all(o["passed"] for o in record["outputs"].values()), record
    # A weight that the device holds wrong (the last fragment's first) makes every
    # microbatch's result wrong, and the check says so.
    last = compiled.fragments[-1]
    lowered = compiled.lowered[last.name]
    weight = next(n for n in lowered.graph.params if n in lowered.bindings)
    buf = lowered.bindings[weight]
    compiled.queues[last.device].enqueue_write_buffer(buf, np.zeros(buf.shape, np.float32))
    with pytest.warns(UserWarning, match=r"output 'probs#[01]' differs from the float64") as w:
        record = compiled.save_binary_and_check(tmp_path / "q.mnlb", stacked)
    assert sorted(str(m.message).split("'")[3] for m in w) == ["probs#0", "probs#1"]
    assert not any(o["passed"] for o in record["outputs"].values()), record
    compiled.close()
