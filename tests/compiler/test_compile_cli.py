"""`mnrt compile MODEL.onnx`: goldens from ONNX's reference evaluator, replayed by mnrt run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from onnx_harness import (
    initializer,
    onnx_model,
    relu_model,
    saved_relu_model,
    value_info,
)

import mnrt
from mnrt.runner.cli import cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def small_model(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [w],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("float_dtype", ["float", "mixed"])
def test_compile_cli_writes_a_binary_that_mnrt_run_verifies(tmp_path, float_dtype):
    model = tmp_path / "small.onnx"
    small_model(model)
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32))
    out = tmp_path / "small.mnlb"
    cg = tmp_path / "cg"
    args = ["compile", str(model), "-o", str(out), "--float-dtype", float_dtype,
            "--codegen-dir", str(cg), "--input", f"x={x}", "--option", "scheduler=anneal",
            "--option", "sa_expected_run_iters=20"]  # fmt: skip
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    written = json.loads((cg / "option.json").read_text())["args"]
    assert "--scheduler=anneal" in written and "--sa_expected_run_iters=20" in written
    r = CliRunner().invoke(cli, ["run", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["checks"][0]["name"] == "y"
    assert (cg / "report.json").is_file()


def test_compile_cli_errors(tmp_path):
    model = tmp_path / "small.onnx"
    small_model(model)
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "o.mnlb"),
                                 "--input", "z=random"])  # fmt: skip
    assert r.exit_code == 2 and "unknown input(s) z" in r.output
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "o.mnlb"),
                                 "--input", "x"])  # fmt: skip
    assert r.exit_code == 2
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "o.mnlb"),
                                 "--option", "schedular=anneal"])  # fmt: skip
    assert r.exit_code == 2 and "unknown compile option 'schedular'" in r.output
    assert "valid options are" in r.output


def test_a_model_is_never_overwritten_by_what_its_compile_writes(tmp_path):
    """`-o` or `out_onnx` naming the model itself or an --input file, or a codegen_dir
    holding the model as the model.onnx it writes (compiling an earlier compile's export
    into the same folder): refused, and the file's bytes stay as they were."""
    model = tmp_path / "small.onnx"
    small_model(model)
    kept = model.read_bytes()
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(model)])
    assert r.exit_code == 2 and "is the model being compiled" in r.output
    assert model.read_bytes() == kept
    cg = tmp_path / "cg"
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "a.mnlb"),
                                 "--codegen-dir", str(cg)])  # fmt: skip
    assert r.exit_code == 0, r.output
    export = (cg / "model.onnx").read_bytes()
    r = CliRunner().invoke(cli, ["compile", str(cg / "model.onnx"), "-o",
                                 str(tmp_path / "b.mnlb"), "--codegen-dir", str(cg)])  # fmt: skip
    assert r.exit_code == 2 and "would replace the model being compiled" in r.output
    assert (cg / "model.onnx").read_bytes() == export
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "c.mnlb"),
                                 "--option", f"out_onnx={model}"])  # fmt: skip
    assert r.exit_code == 2 and "out_onnx" in r.output and "the model being compiled" in r.output
    assert model.read_bytes() == kept
    given = tmp_path / "x.npy"  # nor an --input file
    np.save(given, np.ones((2, 3), np.float32))
    before = given.read_bytes()
    for option in (["-o", str(given)], ["-o", str(tmp_path / "d.mnlb"), "--option",
                                        f"out_onnx={given}"]):  # fmt: skip
        r = CliRunner().invoke(cli, ["compile", str(model), "--input", f"x={given}", *option])
        assert r.exit_code == 2 and "is the file of --input x=" in r.output, r.output
        assert given.read_bytes() == before


def test_the_reference_of_an_onnx_model_comes_from_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model = tmp_path / "small.onnx"
    small_model(model)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    with mnrt.Context() as ctx:
        compiled = ctx.compile(str(model), {"x": x})
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x})[0]
        np.testing.assert_array_equal(compiled.reference({"x": x})["y"], want)


def test_integer_inputs_given_no_data_are_valid_indices(tmp_path):
    # An embedding lookup: random indices (standard normal, cast) would be negative or past
    # the table and fail on the device; zeros always fit.
    table = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)], "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 4])], [table],
    )  # fmt: skip
    model = tmp_path / "embed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = tmp_path / "embed.mnlb"
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert CliRunner().invoke(cli, ["run", str(out)]).exit_code == 0


@pytest.mark.parametrize(
    ("node", "opset"),
    [
        (helper.make_node("LRN", ["x"], ["y"], size=3), 17),
        (helper.make_node("Softmax", ["x"], ["y"], axis=1), 11),
    ],
    ids=["lrn", "softmax-opset11"],
)
def test_goldens_avoid_the_reference_evaluators_known_mistakes(tmp_path, node, opset):
    # ONNX's evaluator sums LRN over the batch and ignores Softmax's 2-D coercion before
    # opset 13; goldens from it would fail a correct replay.
    graph = helper.make_graph(
        [node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 2, 2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = np.random.default_rng(3).standard_normal((1, 5, 2, 2)).astype(np.float32)
    with mnrt.Context() as ctx:
        compiled = ctx.compile(model, {"x": x})
        compiled.save_binary(tmp_path / "m.mnlb")
    assert mnrt.replay(tmp_path / "m.mnlb").passed


@pytest.mark.parametrize("spelling", [["-O2"], ["-O", "O2"], ["-OO2"], ["-O", "2"]])
@pytest.mark.parametrize("command", ["compile", "demo"])
def test_every_spelling_of_a_preset_selects_it(tmp_path, command, spelling):
    # -O2 reached the compiler as the preset '2' and was refused, where -O O2 worked.
    if command == "compile":
        small_model(tmp_path / "small.onnx")
        args = ["compile", str(tmp_path / "small.onnx"), "-o", str(tmp_path / "o.mnlb")]
    else:
        args = ["demo", "--model", "mlp"]
    r = CliRunner().invoke(cli, [*args, *spelling])
    assert r.exit_code == 0, r.output
    assert "float_dtype=mixed" in r.output  # O2's; O1, the default, is float


def _cli(tmp_path, *args):
    model = tmp_path / "m.onnx"
    if not model.exists():
        onnx.save(relu_model(), model)
    return CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "o.mnlb"), *args])


def test_cli_refuses_an_npz_archive_and_a_twice_given_input(tmp_path):
    np.savez(tmp_path / "x.npz", x=np.zeros((2, 3), np.float32))
    r = _cli(tmp_path, "--input", f"x={tmp_path / 'x.npz'}")
    assert r.exit_code == 2 and "is an .npz archive" in r.output, r.output
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    r = _cli(tmp_path, "--input", "x=random", "--input", f"x={tmp_path / 'x.npy'}")
    assert r.exit_code == 2 and "input x is given twice" in r.output, r.output


def test_cli_never_unpickles_an_input(tmp_path):
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    r = _cli(tmp_path, "--input", f"x={tmp_path / 'o.npy'}")
    assert r.exit_code == 2 and "allow_pickle=False" in r.output, r.output


def test_cli_does_not_make_random_data_the_device_could_not_hold(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(
        onnx_model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [value_info("x", [2**40, 3])],
            [value_info("y", None)],
        ),
        model,
    )
    r = _cli(tmp_path)
    assert r.exit_code == 3 and "input x of shape (1099511627776, 3) needs" in r.output, r.output


def test_cli_reports_an_unwritable_codegen_dir_on_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    r = _cli(tmp_path, "--codegen-dir", str(tmp_path / "f" / "sub"))
    assert r.exit_code == 2 and r.output.startswith("mnrt: error: codegen_dir"), r.output


HANG_S = 60  # a hang guard, not a timing


HUGE = np.array([10**6, 10**6], np.int64)  # 3.6 TiB of float32


def compile_cli(*args):
    """The CLI in-process: (exit code, its one error line)."""
    r = CliRunner().invoke(cli, ["compile", *map(str, args)])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 0 or (len(lines) == 1 and lines[0].startswith("mnrt: error: ")), r.output
    return r.exit_code, r.output


def compile_cli_guarded(*args):
    """The CLI in a child process, for inputs that once hung it."""
    run = subprocess.run([sys.executable, "-m", "mnrt", "compile", *map(str, args)],
                         capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr
    return run.returncode, run.stderr


def folded_to_huge(op):
    """`op` of a constant by a shape that is itself computed from constants, so ONNX shape
    inference cannot size it before constant folding does."""
    inits = [numpy_helper.from_array(HUGE, "a"),
             numpy_helper.from_array(np.zeros(2, np.int64), "b"),
             numpy_helper.from_array(np.ones((1, 1), np.float32), "c")]  # fmt: skip
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node(op, ["c", "s"], ["e"]),
             helper.make_node("Add", ["x", "e"], ["y"])]  # fmt: skip
    return onnx_model(nodes, [value_info("x", [1, 1])], [value_info("y", None)], inits)


@pytest.mark.parametrize("op", ["Expand", "Tile"])
def test_constants_folded_to_a_huge_shape_are_refused_before_allocating(tmp_path, op):
    with mnrt.Context() as ctx, pytest.raises(mnrt.MnrtError, match="more than the device"):
        ctx.compile(folded_to_huge(op), {"x": np.zeros((1, 1), np.float32)})
    onnx.save(folded_to_huge(op), tmp_path / "m.onnx")
    assert compile_cli(tmp_path / "m.onnx", "-o", tmp_path / "o.mnlb")[0] == 2


def test_an_npy_input_whose_header_promises_more_than_the_file_holds(tmp_path):
    npy = tmp_path / "huge.npy"
    with open(npy, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)}
        )
        f.write(b"\0" * 24)
    code, out = compile_cli(saved_relu_model(tmp_path / "m.onnx"), "-o", tmp_path / "o.mnlb",
                            "--input", f"x={npy}")  # fmt: skip
    assert code == 2 and "only 24 bytes follow" in out


@pytest.mark.parametrize("what", ["model", "input", "option_json"])
def test_a_fifo_given_as_a_file_is_refused_not_waited_on(tmp_path, what):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = {
        "model": [fifo, "-o", tmp_path / "o.mnlb"],
        "input": [
            saved_relu_model(tmp_path / "m.onnx"),
            "-o",
            tmp_path / "o.mnlb",
            "--input",
            f"x={fifo}",
        ],
        "option_json": [
            saved_relu_model(tmp_path / "m.onnx"),
            "-o",
            tmp_path / "o.mnlb",
            "-O",
            fifo,
        ],
    }[what]
    code, err = compile_cli_guarded(*args)
    assert code == 2 and "not a regular file" in err, err


def gather_model():
    return onnx_model(
        [helper.make_node("Gather", ["x", "i"], ["y"])],
        [value_info("x", [2, 3]), value_info("i", [2], TensorProto.INT64)],
        [value_info("y", None)],
    )


def test_inputs_out_of_range_for_the_model_are_a_one_line_device_error(tmp_path):
    # The reference (onnxruntime, then the float64 run of the graph on the device) cannot
    # gather row 5 of 2: a device error naming the kernel, not a traceback.
    inputs = {"x": np.zeros((2, 3), np.float32), "i": np.array([5, 0])}  # 5: out of range
    with mnrt.Context() as ctx:
        compiled = ctx.compile(gather_model(), inputs)
        with pytest.raises(mnrt.MnrtError, match="'gather': index 5 is out of range"):
            compiled.save_binary(tmp_path / "o.mnlb")
    onnx.save(gather_model(), tmp_path / "g.onnx")
    np.save(tmp_path / "i.npy", inputs["i"])
    code, out = compile_cli(tmp_path / "g.onnx", "-o", tmp_path / "o.mnlb", "--input",
                            f"i={tmp_path / 'i.npy'}")  # fmt: skip
    assert code == 3 and "out of range" in out and len(out.strip().splitlines()) == 1


def test_an_op_version_the_reference_evaluator_lacks_still_saves(tmp_path):
    # Goldens no longer come from ONNX's reference evaluator (which has no Reshape-1): the
    # binary holds the program's own results, checked against the float64 graph run.
    m = onnx_model(
        [helper.make_node("Reshape", ["x"], ["y"], shape=[3, 2])],
        [value_info("x", [2, 3])],
        [value_info("y", None)],
        opset=1,
    )
    with mnrt.Context() as ctx:
        compiled = ctx.compile(m, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
        compiled.save_binary(tmp_path / "o.mnlb")
    assert mnrt.replay(tmp_path / "o.mnlb").passed


def test_a_deeply_nested_option_json_is_a_one_line_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    code, out = compile_cli(saved_relu_model(tmp_path / "m.onnx"), "-o", tmp_path / "o.mnlb",
                            "-O", deep)  # fmt: skip
    assert code == 2 and "not valid JSON" in out


def test_compile_explain_lists_rejected_mappings_and_what_ruled_them_out(tmp_path):
    model = tmp_path / "small.onnx"
    small_model(model)
    r = CliRunner().invoke(
        cli, ["compile", str(model), "-o", str(tmp_path / "s.mnlb"), "-O3", "--explain"]
    )
    assert r.exit_code == 0, r.output
    assert "gemm):\nchosen: pe " in r.output  # (gemm), or (chain with gemm): its prologue
    assert "rejected:" in r.output and ("dominated by" in r.output or "GRF:" in r.output)
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "s.mnlb"), "--json"])
    assert r.exit_code == 0, r.output  # the mappings it chose replay


def test_compile_explain_of_a_pipeline_is_refused_rather_than_ignored(tmp_path):
    model = tmp_path / "small.onnx"
    small_model(model)
    code, out = compile_cli(model, "-o", tmp_path / "s.mnlb", "--devices", "2", "--explain")
    assert code == 2 and "compile without --devices" in out
    assert not (tmp_path / "s.mnlb").exists()


def test_a_warning_is_one_line_as_errors_are(tmp_path):
    """Python's own format names the line of click that called the command and quotes it;
    the CLI prints `mnrt: warning: ...` instead, once per warning."""
    model = onnx_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [value_info("x", [2, 3])],
        [value_info("y", [2, 5])],  # computes [2, 4]
        [initializer("w", np.ones((3, 4), np.float32))],
    )
    onnx.save(model, tmp_path / "m.onnx")
    run = subprocess.run(
        [sys.executable, "-m", "mnrt", "compile", tmp_path / "m.onnx", "-o", tmp_path / "m.mnlb"],
        capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [
        "mnrt: warning: ONNX model 'g' declares output 'y' as [2, 5] but computes [2, 4]; the "
        "compiled function gives [2, 4]: fix the model's declared output shape"
    ]


def test_input_files_fix_what_the_model_leaves_open(tmp_path):
    """--input files are the example inputs: a symbolic dimension takes the file's size and
    an input an op reads at import time (Expand's shape) becomes a constant; without its
    file that input is named with the flag that gives it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"])], "e", [x, shape], [y]
    )
    model = tmp_path / "expand.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    np.save(tmp_path / "x.npy", np.arange(3, dtype=np.float32).reshape(3, 1))
    np.save(tmp_path / "shape.npy", np.array([3, 4], np.int64))
    out = tmp_path / "e.mnlb"
    given = ["--input", f"x={tmp_path / 'x.npy'}", "--input", f"shape={tmp_path / 'shape.npy'}"]
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(out), *given])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["run", str(out), "--save-outputs", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(
        np.load(tmp_path / "o" / "e.y.npy"), np.tile(np.arange(3.0)[:, None], 4)
    )
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(out), *given[:2]])
    assert r.exit_code == 2 and "mnrt compile --input shape=FILE.npy" in r.output
    # Two inputs of symbolic shape, neither given: each named with its flag, the two kept
    # apart on the error's one line (they ran together: "...that fixes it input 'b' ...")
    a, b = (helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n"]) for n in "ab")
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "ab", [a, b], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(out)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "2 unsupported input(s): input 'a' has a symbolic" in r.output  # not "node(s)"
    assert "(ctx.compile(model, inputs), or mnrt compile --input a=FILE.npy); input 'b'" in r.output


def test_an_infinite_error_against_the_reference_is_strict_json(tmp_path):
    """x * 1e30 * 1e30 overflows float32 in onnxruntime; half saturates on the device: the
    error is infinite, which `--json` and report.json printed as the bare Infinity that
    strict JSON parsers refuse."""
    big = numpy_helper.from_array(np.array(1e30, np.float32), "big")
    nodes = [
        helper.make_node("Mul", ["x", "big"], ["h"]),
        helper.make_node("Mul", ["h", "big"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph(nodes, "big", [x], [y], [big])
    model = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    cg = tmp_path / "cg"
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "b.mnlb"), "--json",
                                 "--float-dtype", "half", "--codegen-dir", str(cg)])  # fmt: skip
    assert r.exit_code == 0, r.output

    def strict(text: str) -> dict:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))

    doc = strict(r.output[r.output.index("{") :])
    assert doc["accuracy"]["outputs"]["y"]["max_abs_err"] == "inf"
    (saved,) = [p for p in strict((cg / "report.json").read_text())["phases"] if "accuracy" in p]
    assert saved["accuracy"]["outputs"]["y"]["max_abs_err"] == "inf"
