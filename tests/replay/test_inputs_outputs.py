"""A binary's inputs and outputs: recorded at capture, derived for older binaries, replaced
and compared on replay (`replay(inputs=..., expected=...)`, `report.outputs`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from binaries import write_and_read
from cli_harness import invoke_cli
from hostile import edited
from hypothesis import given
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.format import jsonio
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.format.io import Namer, derive


def _capture_affine():
    """y = x @ w + b with w made before capture began (a snapshot, not an input)."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        w = dev.create_buffer((3, 2), "float", name="w")
        q.enqueue_write_buffer(w, np.arange(6, dtype=np.float32).reshape(3, 2))
        mnrt.begin_capture()
        x = dev.create_buffer((4, 3), "float", name="x")
        b = dev.create_buffer((2,), "float", name="b")
        y = dev.create_buffer((4, 2), "float", name="y")
        prog = dev.create_program([mnrt.Kernel("gemm", ["x", "w", "b"], ["y"])])
        q.enqueue_write_buffer(x, np.ones((4, 3), np.float32))
        q.enqueue_write_buffer(b, np.zeros(2, np.float32))
        q.enqueue_program(prog, {"x": x, "w": w, "b": b, "y": y})
        q.enqueue_read_buffer(y)
        return mnrt.end_capture()


def _compiled(tmp_path) -> mnrt.LightBinary:
    """A compiled binary: its reads are golden checks (compare_to_golden), not reads."""
    b = GraphBuilder("fc")
    x = b.input("x", (2, 3), "float")
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    b.output(b.relu(b.gemm(x, b.param("w", w))), "y")
    with mnrt.Context(mnrt.MNDevice("mncore2:0")) as ctx:
        compiled = ctx.compile(b, {"x": np.ones((2, 3), np.float32)})
        compiled.save_binary(tmp_path / "c.mnlb")
    return mnrt.LightBinary.load(tmp_path / "c.mnlb")


def test_capture_lists_host_written_inputs_and_read_outputs_not_snapshots():
    binary = _capture_affine()
    assert binary.version >= (1, 1) and binary.io_recorded
    assert [(e.name, e.shape) for e in binary.inputs] == [("x", (4, 3)), ("b", (2,))]
    assert [(e.name, e.shape) for e in binary.outputs] == [("y", (4, 2))]
    # Derived from the commands alone, the snapshot of w would count as an input too.
    ins, outs = derive(binary.commands)
    assert len(ins) == 3 and len(outs) == 1


def test_older_binaries_derive_their_lists_from_the_commands():
    binary = mnrt.LightBinary.load("samples/traced_loop.mnlb")
    assert binary.version == (1, 0) and not binary.io_recorded
    assert [e.name for e in binary.inputs] == ["s", "w", "dt"]
    assert [e.name for e in binary.outputs] == ["s"]  # read back: an input and an output


def test_the_lists_survive_the_json_form():
    binary = _capture_affine()
    again = jsonio.from_json(json.loads(jsonio.dumps(binary)))
    assert again.io_recorded and again.inputs == binary.inputs
    assert again.outputs == binary.outputs


def test_buffers_that_share_a_name_get_unique_ones():
    name = Namer()
    assert [name(b) for b in ("a", "a#2", "a", "a", "b")] == ["a", "a#2", "a#3", "a#4", "b"]
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        first, second = (dev.create_buffer((2,), "int32", name="t") for _ in range(2))
        unnamed = dev.create_buffer((2,), "int32")
        for buf in (first, second, unnamed):
            q.enqueue_write_buffer(buf, np.array([1, 2], np.int32))
        q.enqueue_read_buffer(second)
        binary = mnrt.end_capture()
    names = [e.name for e in binary.inputs]
    assert names[:2] == ["t", "t#2"] and len(set(names)) == 3
    assert [e.name for e in binary.outputs] == ["t#2"]  # the same name as an input and output


def test_recorded_lists_are_validated(small_binary):
    def listing(field, ids):
        def edit(doc):
            doc[field] = ids

        return edit

    for field, ids, message in (
        ("inputs", [99], "no command creates it"),
        ("outputs", [2, 2], "listed as an output twice"),
    ):
        bad = edited(small_binary, listing(field, ids))
        with pytest.raises(mnrt.InvalidBinaryError, match=message):
            mnrt.replay(bad)
    read = next(c.cmd.bufferId for c in small_binary.commands if c.cmdType == U.ReadBuffer)
    bad = edited(small_binary, listing("inputs", [read]))  # y is never written
    with pytest.raises(mnrt.InvalidBinaryError, match="no command writes it"):
        mnrt.replay(bad)


def test_new_inputs_replace_the_recorded_writes_and_goldens_no_longer_apply():
    binary = _capture_affine()
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    report = mnrt.replay(binary, inputs={"x": x})
    np.testing.assert_allclose(report.outputs["y"], x @ np.arange(6).reshape(3, 2))
    # Not a mismatch against goldens of other inputs, and not a PASS either.
    assert report.checks == [] and not report.verified
    assert report.verdict.startswith("RAN WITH NEW INPUTS, NOT VERIFIED")
    assert json.loads(report.to_json())["new_inputs"] == ["x"]
    # No new inputs after all: the recorded goldens apply.
    report = mnrt.replay(binary, inputs={})
    assert report.verified and report.verdict == "PASS" and len(report.checks) == 1


def test_expected_outputs_are_compared_at_the_recorded_tolerances():
    binary = _capture_affine()
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    want = (x @ np.arange(6, dtype=np.float32).reshape(3, 2)).astype(np.float32)
    report = mnrt.replay(binary, inputs={"x": x}, expected={"y": want})
    assert report.passed and report.verified and [c.name for c in report.checks] == ["y"]
    assert report.verdict == "PASS" and report.checks[0].rtol == mnrt.float32.rtol
    report = mnrt.replay(binary, inputs={"x": x}, expected={"y": want * 1.01})
    assert not report.passed and report.checks[0].mismatches > 0
    assert mnrt.replay(binary, inputs={"x": x}, expected={"y": want * 1.01}, rtol=0.1).passed
    # Without new inputs, the recorded golden applies as well: each check is named once.
    report = mnrt.replay(binary, expected={"y": np.full((4, 2), 6.0, np.float32)})
    assert [c.name for c in report.checks] == ["y", "y#2"] and not report.passed


def test_wrong_names_shapes_and_dtypes_are_clear_errors():
    binary = _capture_affine()
    x = np.ones((4, 3), np.float32)
    with pytest.raises(mnrt.InvalidArgumentError, match=r"'z' is not an input.* x float\[4, 3\]"):
        mnrt.replay(binary, inputs={"z": x})
    with pytest.raises(mnrt.InvalidArgumentError, match=r"its outputs are y float\[4, 2\]"):
        mnrt.replay(binary, expected={"x": x})
    with pytest.raises(mnrt.ShapeError, match=r"has shape \(3, 4\)"):
        mnrt.replay(binary, inputs={"x": x.T})
    with pytest.raises(mnrt.DTypeError, match="float64.*takes float32"):
        mnrt.replay(binary, inputs={"x": x.astype(np.float64)})
    with pytest.raises(mnrt.InvalidArgumentError, match="must be a numpy array"):
        mnrt.replay(binary, inputs={"x": x.tolist()})
    with pytest.raises(mnrt.InvalidArgumentError, match="only with verify=True"):
        mnrt.replay(binary, expected={"y": np.ones((4, 2), np.float32)}, verify=False)


def test_an_expected_output_of_another_float_width_is_compared_as_it_is():
    """A float64 reference of a float output (numpy's default, ONNX's test data of a double
    model compiled in float) is compared without being cast first: a check compares in
    float64. Integers likewise; a float for an integer output is still refused."""
    binary = _capture_affine()
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    want = x.astype(np.float64) @ np.arange(6).reshape(3, 2)
    report = mnrt.replay(binary, inputs={"x": x}, expected={"y": want})
    assert report.passed and report.checks[0].max_abs_err == 0
    assert not mnrt.replay(binary, inputs={"x": x}, expected={"y": want + 1}).passed
    with pytest.raises(mnrt.DTypeError, match="float64.*takes float32"):
        mnrt.replay(binary, inputs={"x": x.astype(np.float64)})  # a write: refused
    with pytest.raises(mnrt.DTypeError, match="int64.*takes float32"):
        mnrt.replay(binary, expected={"y": want.astype(np.int64)})


def test_a_half_input_takes_float_data_rounded_as_the_device_does():
    binary = write_and_read("h", "half", np.zeros(3, np.float32))
    value = np.array([1.0, 1.0 + 2**-12, 3.0], np.float64)  # 1 + 2**-12 rounds to 1 in half
    report = mnrt.replay(binary, inputs={"h": value}, expected={"h": value})
    assert report.passed and report.outputs["h"].tolist() == [1.0, 1.0, 3.0]


def test_compiled_binaries_have_outputs(tmp_path):
    # Their only reads are golden checks: replay returned no outputs for them. The goldens
    # also check what the kernel computing an output read (compiler/goldens.py), so that
    # value is an output of the binary too.
    binary = _compiled(tmp_path)
    assert [e.name for e in binary.inputs] == ["fc.x"]
    report = mnrt.replay(binary)
    assert report.passed and next(iter(report.outputs)) == "fc.y"
    np.testing.assert_array_equal(report.outputs["fc.y"], np.full((2, 2), [6.0, 9.0]))
    x = -np.ones((2, 3), np.float32)
    report = mnrt.replay(binary, inputs={"fc.x": x}, expected={"fc.y": np.zeros((2, 2), "f4")})
    assert report.passed and report.outputs["fc.y"].tolist() == [[0, 0], [0, 0]]
    # The model's own names, without the graph's: what a user of the model knows.
    report = mnrt.replay(binary, inputs={"x": x}, expected={"y": np.zeros((2, 2), "f4")})
    assert report.passed and report.outputs["fc.y"].tolist() == [[0, 0], [0, 0]]


def test_a_name_two_entries_end_with_is_refused_naming_both(tmp_path):
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        for name in ("a.x", "b.x"):
            buf = dev.create_buffer((2,), "float", name=name)
            q.enqueue_write_buffer(buf, np.ones(2, np.float32))
            q.enqueue_read_buffer(buf)
        binary = mnrt.end_capture()
    with pytest.raises(mnrt.InvalidArgumentError, match=r"'x' could be the input 'a.x' or 'b.x'"):
        mnrt.replay(binary, inputs={"x": np.zeros(2, np.float32)})
    assert mnrt.replay(binary, inputs={"b.x": np.zeros(2, np.float32)}).outputs["b.x"].sum() == 0


def test_each_output_once_its_last_read():
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        a = dev.create_buffer((2,), "int32", name="a")
        q.enqueue_write_buffer(a, np.array([1, 2], np.int32))
        q.enqueue_read_buffer(a)
        q.enqueue_write_buffer(a, np.array([3, 4], np.int32))
        q.enqueue_read_buffer(a)
        binary = mnrt.end_capture()
    report = mnrt.replay(binary)
    assert report.outputs.keys() == {"a"} and report.outputs["a"].tolist() == [3, 4]
    assert [c.name for c in report.checks] == ["a", "a#2"] and report.passed


def test_one_array_fills_the_microbatches_of_a_pipelined_input_and_output(tmp_path):
    """A pipelined compile's input x is the binary's x#0, x#1, x#2 (one per microbatch): an
    array with the microbatches along its first axis is given for all three, as the
    compile took it, and so is one for the output."""
    b = GraphBuilder("pp")
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    h = b.relu(b.gemm(b.input("x", (2, 3), "float"), b.param("w", w)))
    b.output(b.gemm(h, b.param("v", np.eye(2, dtype=np.float32))), "y")
    xs = np.arange(18, dtype=np.float32).reshape(3, 2, 3) - 8
    with mnrt.Context() as ctx:
        mpmd = {"devices": [0, 1], "microbatches": 3}
        compiled = ctx.compile(b, {"x": xs[0]}, options={"mpmd": mpmd})
        compiled.save_binary(tmp_path / "pp.mnlb")
        compiled.close()
    binary = mnrt.LightBinary.load(tmp_path / "pp.mnlb")
    assert [e.name for e in binary.inputs] == ["x#0", "x#1", "x#2"]
    # listed as the one array that fills them (mnrt info, and what a wrong name is told)
    code, out = invoke_cli("info", tmp_path / "pp.mnlb")
    assert "inputs:    x#0..2 float[2, 3] (one x float[3, 2, 3] fills them)\n" in out, out
    assert "outputs:   y#0..2 float[2, 2] (one y float[3, 2, 2] fills them)\n" in out, out
    with pytest.raises(mnrt.InvalidArgumentError, match=r"inputs are x#0\.\.2 float\[2, 3\] \("):
        mnrt.replay(binary, inputs={"z": xs})
    want = np.maximum(xs @ w, 0)
    report = mnrt.replay(binary, inputs={"x": xs}, expected={"y": want})
    assert report.passed and [c.name for c in report.checks] == ["y#0", "y#1", "y#2"]
    for m in range(3):
        np.testing.assert_array_equal(report.outputs[f"y#{m}"], want[m])
    wrong = want.copy()
    wrong[2, 1, 0] += 1
    report = mnrt.replay(binary, inputs={"x": xs}, expected={"y": wrong})
    assert [c.passed for c in report.checks] == [True, True, False]
    with pytest.raises(mnrt.ShapeError, match=r"3 microbatches x#0 \.\. x#2 .*\(3, 2, 3\)"):
        mnrt.replay(binary, inputs={"x": xs[0]})
    with pytest.raises(mnrt.InvalidArgumentError, match="'x#1' is given twice"):
        mnrt.replay(binary, inputs={"x": xs, "x#1": xs[1]})
    np.save(tmp_path / "x.npy", xs)
    np.save(tmp_path / "y.npy", want)
    code, out = invoke_cli(
        "run", tmp_path / "pp.mnlb", "--input", f"x={tmp_path / 'x.npy'}",
        "--expected", f"y={tmp_path / 'y.npy'}",
    )  # fmt: skip
    assert code == 0 and out.startswith("PASS: "), out
    # --save-outputs writes the microbatches, and also y.npy as --expected took it
    saved = tmp_path / "out"
    code, out = invoke_cli("run", tmp_path / "pp.mnlb", "--input", f"x={tmp_path / 'x.npy'}",
                           "--save-outputs", saved)  # fmt: skip
    assert code == 0, out
    assert sorted(p.name for p in saved.iterdir()) == ["y#0.npy", "y#1.npy", "y#2.npy", "y.npy"]
    np.testing.assert_array_equal(np.load(saved / "y.npy"), want)
    code, out = invoke_cli("run", tmp_path / "pp.mnlb", "--expected", f"y={tmp_path / 'y.npy'}",
                           "--save-outputs", tmp_path)  # fmt: skip
    assert code == 2 and f"would replace --expected y={tmp_path / 'y.npy'}" in out, out
    # one microbatch is a pipeline's too: its array has the leading axis of one
    one = write_and_read("x#0", "float", np.ones(2, np.float32))
    report = mnrt.replay(one, inputs={"x": np.full((1, 2), 3, np.float32)})
    assert report.outputs["x#0"].tolist() == [3, 3]
    with pytest.raises(
        mnrt.ShapeError, match=r"as microbatch x#0 of shape \(2,\): give an array of shape \(1, 2\)"
    ):
        mnrt.replay(one, inputs={"x": np.ones(2, np.float32)})


def test_microbatch_families_start_at_zero_and_leave_names_that_are_taken():
    from mnrt.format.io import IoBuffer
    from mnrt.replay.io import describe, families, stacked

    names = ["y#0", "y#1", "y#2", "a", "a#0", "b#1", "b#2", "c#0", "c#2", "d#0#0"]
    assert families(names) == {"y": ["y#0", "y#1", "y#2"], "c": ["c#0"], "d#0": ["d#0#0"]}
    two = np.ones((2, 3), np.float32)
    outputs = {"y#0": two, "y#1": 2 * two, "z#0": two, "z#1": np.ones(3, np.float32)}
    got = stacked(outputs)
    assert got.keys() == {"y"} and got["y"].shape == (2, 2, 3) and got["y"][1, 0, 0] == 2
    code = mnrt.float32.code
    entries = [
        IoBuffer(name, i, shape, code)
        for i, (name, shape) in enumerate(
            [("w", (2,)), ("x#0", (3,)), ("x#1", (3,)), ("c#0", (1,)), ("z#0", (1,)), ("z#1", (2,))]
        )
    ]
    assert describe(entries) == (
        "w float[2], x#0..1 float[3] (one x float[2, 3] fills them), c#0 float[1], "
        "z#0 float[1], z#1 float[2]"
    )


@given(
    st.lists(
        st.sampled_from(["y", "y#0", "y#1", "y#2", "y#3", "a#0", "a#1", "a#0#0", "#0", "b"]),
        unique=True,
    )
)
def test_families_are_the_names_one_array_fills(names):
    """Each family is a run name#0, name#1, ... of the names, as long as it goes, whose stem
    is not itself a name; every name#0 whose stem is not a name starts one."""
    from mnrt.replay.io import families

    got = families(names)
    for stem, members in got.items():
        assert stem and stem not in names
        assert members == [f"{stem}#{m}" for m in range(len(members))]
        assert f"{stem}#{len(members)}" not in names
    starts = {n.rpartition("#")[0] for n in names if n.endswith("#0") and n[:-2]}
    assert set(got) == {stem for stem in starts if stem not in names}
