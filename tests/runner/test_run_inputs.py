"""`mnrt run FILE --input NAME=x.npy --expected NAME=y.npy --output-dir DIR`, and what
`mnrt info` says a binary's inputs and outputs are."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from cli_harness import one_line_error, run

import mnrt


@pytest.fixture
def affine(tmp_path):
    """y = x @ w (w captured as an input too), saved; returns its path."""
    path = tmp_path / "affine.mnlb"
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        with mnrt.capture(path):
            x = dev.create_buffer((4, 3), "float", name="x")
            w = dev.create_buffer((3, 2), "float", name="w")
            y = dev.create_buffer((4, 2), "float", name="y")
            prog = dev.create_program([mnrt.Kernel("gemm", ["x", "w"], ["y"])])
            q.enqueue_write_buffer(x, np.ones((4, 3), np.float32))
            q.enqueue_write_buffer(w, np.arange(6, dtype=np.float32).reshape(3, 2))
            q.enqueue_program(prog, {"x": x, "w": w, "y": y})
            q.enqueue_read_buffer(y)
    return path


def _npy(tmp_path, name: str, array: np.ndarray) -> str:
    path = tmp_path / name
    np.save(path, array)
    return str(path)


X = np.arange(12, dtype=np.float32).reshape(4, 3)
Y = X @ np.arange(6, dtype=np.float32).reshape(3, 2)


def test_new_inputs_saved_outputs_and_a_verdict_that_is_no_pass(affine, tmp_path):
    out = tmp_path / "out"
    r = run(
        "run", str(affine), "--input", f"x={_npy(tmp_path, 'x.npy', X)}", "--output-dir", str(out)
    )
    assert r.exit_code == 0, r.output
    assert r.output.startswith("RAN WITH NEW INPUTS, NOT VERIFIED") and "PASS" not in r.output
    assert sorted(p.name for p in out.iterdir()) == ["y.npy"]
    np.testing.assert_array_equal(np.load(out / "y.npy"), Y)


def test_saved_outputs_never_replace_a_file_the_run_reads(affine, tmp_path):
    """`--input x=D/y.npy --output-dir D` (or `--expected y=D/y.npy`) would write output y
    over the user's file after reading it, and `--report` or `--profile` naming it would
    write over it: refused before the run, the file kept."""
    for flag, name in (("--input", "x"), ("--expected", "y")):
        given = _npy(tmp_path, "y.npy", X if name == "x" else Y)
        kept = (tmp_path / "y.npy").read_bytes()
        r = run("run", str(affine), flag, f"{name}={given}", "--output-dir", str(tmp_path))
        assert r.exit_code == 2 and f"would replace {flag} {name}={given}" in one_line_error(r)
        assert (tmp_path / "y.npy").read_bytes() == kept
        for output in ("--report", "--profile"):  # nor --report or --profile over it
            r = run("run", str(affine), flag, f"{name}={given}", output, given)
            assert r.exit_code == 2 and f"is also the file of {flag}" in one_line_error(r)
            assert (tmp_path / "y.npy").read_bytes() == kept
    binary = tmp_path / "y.npy"  # nor the binary itself, whatever its name
    binary.write_bytes(affine.read_bytes())
    r = run("run", str(binary), "--output-dir", str(tmp_path))
    assert r.exit_code == 2 and f"would replace the binary {binary}" in one_line_error(r)
    assert binary.read_bytes() == affine.read_bytes()


def test_expected_outputs_pass_or_fail(affine, tmp_path):
    x = _npy(tmp_path, "x.npy", X)
    r = run(
        "run", str(affine), "--input", f"x={x}", "--expected", f"y={_npy(tmp_path, 'y.npy', Y)}"
    )
    assert r.exit_code == 0 and r.output.startswith("PASS:"), r.output
    off = _npy(tmp_path, "off.npy", Y * 1.01)
    report = tmp_path / "r.json"
    r = run(
        "run", str(affine), "--input", f"x={x}", "--expected", f"y={off}", "--report", str(report)
    )
    assert r.exit_code == 1 and r.output.startswith("FAIL:"), r.output
    doc = json.loads(report.read_text())
    assert doc["checks"][0]["name"] == "y" and doc["checks"][0]["worst"]
    assert (
        run(
            "run", str(affine), "--input", f"x={x}", "--expected", f"y={off}", "--rtol", "0.1"
        ).exit_code
        == 0
    )


@pytest.mark.parametrize(
    ("spec", "array", "message"),
    [
        ("z", X, "'z' is not an input of the binary; its inputs are x float[4, 3], w float[3, 2]"),
        ("x", X.T.copy(), "has shape (3, 4); the binary's buffer has shape (4, 3)"),
        ("x", X.astype(np.int32), "is an array of int32; the binary's buffer is float"),
        ("x", np.array([{"a": 1}], dtype=object), "allow_pickle=False"),
    ],
)
def test_wrong_inputs_are_one_line_errors_exit_2(affine, tmp_path, spec, array, message):
    path = tmp_path / "bad.npy"
    np.save(path, array, allow_pickle=True)
    r = run("run", str(affine), "--input", f"{spec}={path}")
    assert r.exit_code == 2 and message in one_line_error(r)


def test_unreadable_and_lying_npy_files_are_refused_before_their_data(affine, tmp_path):
    np.savez(tmp_path / "a.npz", x=X)
    r = run("run", str(affine), "--input", f"x={tmp_path / 'a.npz'}")
    assert r.exit_code == 2 and "is an .npz archive" in one_line_error(r)
    # A header promising a huge array: refused by its shape, nothing allocated.
    huge = tmp_path / "huge.npy"
    with open(huge, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (4, 3 * 10**12)}
        )
    r = run("run", str(affine), "--input", f"x={huge}")
    assert r.exit_code == 2 and "has shape (4, 3000000000000)" in one_line_error(r)
    truncated = tmp_path / "t.npy"
    truncated.write_bytes(_npy_bytes(X)[:-8])
    r = run("run", str(affine), "--input", f"x={truncated}")
    assert r.exit_code == 2 and "only 40 bytes follow" in one_line_error(r)
    r = run("run", str(affine), "--input", f"x={tmp_path / 'missing.npy'}")
    assert r.exit_code == 2 and "no such file" in one_line_error(r)
    r = run("run", str(affine), "--input", f"x={_npy(tmp_path, 'x.npy', X)}", "--input", "x=y")
    assert r.exit_code == 2 and "input x is given twice" in one_line_error(r)
    r = run("run", str(affine), "--expected", f"x={_npy(tmp_path, 'x.npy', X)}")
    assert r.exit_code == 2 and "'x' is not an output" in one_line_error(r)


def _npy_bytes(array: np.ndarray) -> bytes:
    data = io.BytesIO()
    np.save(data, array)
    return data.getvalue()


def test_info_lists_inputs_and_outputs_with_shapes_and_dtypes(affine):
    r = run("info", str(affine))
    assert r.exit_code == 0
    assert "inputs:    x float[4, 3], w float[3, 2]" in r.output
    assert "outputs:   y float[4, 2]" in r.output
    doc = json.loads(run("info", str(affine), "--json").output)
    assert doc["io_recorded"] and doc["outputs"] == [
        {
            "name": "y",
            "shape": [4, 2],
            "dtype": "float",
            "buffer_id": doc["outputs"][0]["buffer_id"],
        }
    ]
    old = run("info", "samples/traced_loop.mnlb")
    assert "(derived from the commands: an older binary)" in old.output


def test_save_outputs_of_a_demo_binary(tmp_path):
    # A compiled binary's reads are golden checks: --save-outputs wrote nothing for it.
    path = tmp_path / "mlp.mnlb"
    assert run("demo", "--model", "mlp", "-o", str(path)).exit_code == 0
    out = tmp_path / "out"
    r = run("run", str(path), "--save-outputs", str(out))
    assert r.exit_code == 0, r.output
    assert "mlp.probs.npy" in [p.name for p in out.iterdir()]
