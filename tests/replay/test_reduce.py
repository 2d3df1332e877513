"""`mnrt reduce`: a failing binary shrunk to a minimal one that fails the same way."""

from __future__ import annotations

import json

import numpy as np
import pytest
from binaries import (
    chain_capture,
    perturbed,
    pipelined_binary,
    three_device_capture,
    views_capture,
    weight_sites,
    with_written,
)
from cli_harness import invoke_cli

import mnrt
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.format.text import decoded
from mnrt.replay.plan import validate
from mnrt.replay.reduce import (
    NotFailingError,
    ddmin,
    failure_of,
    kernel_count,
    reduce,
    with_kernels,
)


def test_ddmin_finds_a_one_minimal_subset():
    tests = []

    def fails(units):
        tests.append(units)
        return {3, 17} <= set(units)

    assert sorted(ddmin(list(range(40)), fails)) == [3, 17]
    assert ddmin([5], lambda u: True) == [5]


def test_a_200_kernel_binary_with_one_wrong_weight_reduces_to_that_kernel():
    binary = chain_capture(200)
    gid = next(s for s in weight_sites(binary) if s[1] == 137)[2]
    bad = perturbed(binary, gid)
    result = reduce(bad)
    assert kernel_count(bad) == 200 and kernel_count(result.binary) <= 3
    assert failure_of(result.binary) == result.failure
    located = mnrt.replay(result.binary, locate=True).locate.first_divergent
    assert (located.op, located.program, located.inputs[1]["buffer"]) == ("add", "chain", "w137")
    assert [s["step"] for s in result.steps] == ["isolate", "commands", "kernels"]
    assert result.steps[0]["kernels"] == [200, 1]


def test_a_device_error_reduces_to_the_failing_kernel_on_its_data():
    binary = chain_capture(200, gather_at=150)
    bad = with_written(binary, "idx", np.array([3, 2, 9, 0], np.int32))  # 9: out of range
    with pytest.raises(mnrt.DeviceError):
        mnrt.replay(bad)
    result = reduce(bad)
    assert kernel_count(result.binary) == 1 and result.failure.kind == "device error"
    text = result.failure.describe()
    assert text.startswith("device error in command") and "'gather'" in text, text
    assert "DeviceExecutionError: " in text and result.failure.reproduce == "", text
    with pytest.raises(mnrt.DeviceError, match="gather"):
        mnrt.replay(result.binary)


def test_without_fingerprints_the_slice_keeps_what_the_failing_golden_reads_from():
    """Ten independent programs, each with its own read; one weight is wrong: the reduced
    binary keeps that program, its writes and its read only, found by following the data
    back from the failing read (one replay to confirm it) rather than by ddmin."""
    rng = np.random.default_rng(2)
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        for i in range(10):
            x = dev.create_buffer((4, 4), "float", name=f"x{i}")
            w = dev.create_buffer((4, 4), "float", name=f"w{i}")
            y = dev.create_buffer((4, 4), "float", name=f"y{i}")
            prog = dev.create_program([mnrt.Kernel("gemm", ["x", "w"], ["y"])], name=f"p{i}")
            q.enqueue_write_buffer(x, rng.standard_normal((4, 4)).astype(np.float32))
            q.enqueue_write_buffer(w, rng.standard_normal((4, 4)).astype(np.float32))
            q.enqueue_program(prog, {"x": x, "w": w, "y": y})
            q.enqueue_read_buffer(y)
        binary = mnrt.end_capture()
    bad = with_written(binary, "w6", np.eye(4, dtype=np.float32))
    result = reduce(bad)
    assert result.failure.kind == "golden mismatch" and kernel_count(result.binary) == 1
    report = mnrt.replay(result.binary)
    assert [c.name for c in report.checks] == ["y6"] and not report.passed
    assert failure_of(result.binary) == result.failure
    (step,) = result.steps
    assert step["step"] == "slice" and step["tests"] == 1 and step["kernels"] == [10, 1]
    written = [c for c in result.binary.commands if c.cmdType == U.WriteBuffer]
    assert len(written) == 2 and step["commands"][1] < step["commands"][0]


def without_fingerprints(binary: mnrt.LightBinary) -> mnrt.LightBinary:
    from mnrt.format.edit import Editor

    return Editor(binary).build(list(binary.commands), fingerprints=())


def test_without_fingerprints_a_chain_every_kernel_of_which_feeds_the_read_is_kept_at_once():
    """Every kernel of the chain feeds the failing read: dropping any changes what it reads,
    so reduce says so at once (ddmin replayed candidates for minutes to learn it: ResNet-50
    ran past the 600 s limit) and points to fingerprints."""
    binary = without_fingerprints(chain_capture(60))
    bad = perturbed(binary, weight_sites(binary)[30][2])
    assert not bad.fingerprints
    result = reduce(bad)
    assert result.failure.kind == "golden mismatch" and kernel_count(result.binary) == 60
    (step,) = result.steps
    assert step["step"] == "slice" and step["tests"] == 0
    assert "fingerprints=True" in step["note"]


def test_the_slice_drops_kernels_whose_results_nothing_checked_reads():
    """A program that also computes a value nobody reads, and overwrites one before reading
    it: the kernels and the write behind them go, the enqueue rebound to the slots left."""
    rng = np.random.default_rng(3)
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        names = ("x", "w", "y", "unused", "scratch")
        bufs = {n: dev.create_buffer((4, 4), "float", name=n) for n in names}
        for n in ("x", "w", "scratch"):
            q.enqueue_write_buffer(bufs[n], rng.standard_normal((4, 4)).astype(np.float32))
        kernels = [
            mnrt.Kernel("relu", ["x"], ["unused"]),
            mnrt.Kernel("mul", ["x", "scratch"], ["scratch"]),  # its result is overwritten
            mnrt.Kernel("add", ["x", "w"], ["scratch"]),
            mnrt.Kernel("mul", ["scratch", "w"], ["y"]),
        ]
        q.enqueue_program(dev.create_program(kernels, name="p"), bufs)
        q.enqueue_read_buffer(bufs["y"])
        q.enqueue_read_buffer(bufs["unused"])
        binary = mnrt.end_capture()
    bad = with_written(binary, "w", np.ones((4, 4), np.float32))
    result = reduce(bad)
    (step,) = result.steps
    assert step["step"] == "slice" and step["kernels"] == [4, 2]
    (program,) = [c.cmd.program for c in result.binary.commands if c.cmdType == U.CreateProgram]
    assert [k.op.decode() for k in program.kernels] == ["add", "mul"]
    report = mnrt.replay(result.binary)
    assert [c.name for c in report.checks] == ["y"] and not report.passed
    written = {c.cmd.bufferId for c in result.binary.commands if c.cmdType == U.WriteBuffer}
    assert len(written) == 2  # x and w: scratch is overwritten before anything reads it


def test_the_slice_drops_a_kernel_that_changed_nothing():
    """An in-place relu of values none of which is negative writes what was there: its
    output feeds the failing read, yet the read's values do not depend on it."""
    rng = np.random.default_rng(4)
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        bufs = {n: dev.create_buffer((4, 4), "float", name=n) for n in ("x", "w", "y")}
        q.enqueue_write_buffer(bufs["x"], 1 + rng.random((4, 4)).astype(np.float32))
        q.enqueue_write_buffer(bufs["w"], rng.standard_normal((4, 4)).astype(np.float32))
        kernels = [mnrt.Kernel("relu", ["x"], ["x"]), mnrt.Kernel("mul", ["x", "w"], ["y"])]
        q.enqueue_program(dev.create_program(kernels, name="p"), bufs)
        q.enqueue_read_buffer(bufs["y"])
        binary = mnrt.end_capture()
    result = reduce(with_written(binary, "w", np.ones((4, 4), np.float32)))
    (step,) = result.steps
    assert step["step"] == "slice" and step["kernels"] == [2, 1] and step["tests"] == 1
    (program,) = [c.cmd.program for c in result.binary.commands if c.cmdType == U.CreateProgram]
    assert [k.op.decode() for k in program.kernels] == ["mul"]


def test_mismatches_alike_in_count_and_largest_error_are_not_the_same_failure():
    """What ddmin keeps must fail with the same wrong values: a softmax dropped from
    SqueezeNet left zeros, off by about 0.001 everywhere as the wrong probabilities were,
    and passed for the same failure when only counts and the largest error were compared."""
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        y = dev.create_buffer((4, 4), "float", name="y")
        mnrt.begin_capture()
        q.enqueue_write_buffer(y, np.zeros((4, 4), np.float32))
        q.enqueue_read_buffer(y)
        binary = mnrt.end_capture()
    above = failure_of(with_written(binary, "y", np.full((4, 4), 0.5, np.float32)))
    below = failure_of(with_written(binary, "y", np.full((4, 4), -0.5, np.float32)))
    assert above.kind == below.kind == "golden mismatch"
    assert above != below
    assert above == failure_of(with_written(binary, "y", np.full((4, 4), 0.5, np.float32)))
    assert "y (16 mismatches, worst 0.5 at [0, 0])" in above.describe()


@pytest.mark.parametrize("limit", [float("nan"), float("inf"), 0, -1.0, "60", True])
def test_reduce_refuses_a_time_limit_that_is_not_finite_seconds(limit):
    # nan never ran out: a deadline of start + nan is never passed.
    bad = chain_capture(4)
    bad = perturbed(bad, weight_sites(bad)[1][2])
    with pytest.raises(mnrt.InvalidArgumentError, match="time_limit_s must be"):
        reduce(bad, time_limit_s=limit)


def test_a_passing_binary_is_refused():
    with pytest.raises(NotFailingError, match="does not fail"):
        reduce(chain_capture(5))


def test_a_binary_that_differs_from_its_capture_by_rounding_alone_does_not_fail():
    """As on a host whose BLAS sums in another order: a kernel's bits differ from its
    fingerprint while its statistics agree and every golden passes. `mnrt run --locate`
    exits 0 for that, and reduce has nothing to reduce (it took the kernel for a failure)."""
    from mnrt.format.edit import Editor

    binary = chain_capture(20)
    prints = [f._replace(stats=f.stats._replace(hash=f.stats.hash ^ 1)) if f.kernel == 7 else f
              for f in binary.fingerprints]  # fmt: skip
    rounded = Editor(binary).build(list(binary.commands), fingerprints=prints)
    report = mnrt.replay(rounded, locate=True)
    assert report.passed and report.locate.first_divergent.verdict == "different rounding"
    assert failure_of(rounded) is None
    with pytest.raises(NotFailingError, match="does not fail"):
        reduce(rounded)


def test_cli_reduce_reports_its_steps(tmp_path):
    binary = chain_capture(40)
    bad, out = tmp_path / "bad.mnlb", tmp_path / "min.mnlb"
    perturbed(binary, weight_sites(binary)[20][2]).save(bad)
    code, text = invoke_cli("reduce", bad, "-o", out, "--failing")
    assert code == 0, text
    assert "isolate: 1 replays, commands" in text and "1 kernel(s)" in text
    # what failed, readably, and the run that shows it: a divergence needs --locate
    assert "divergent kernel in command" in text and "wrong, its outputs hash to " in text
    assert text.rstrip().endswith(f"reproduce: mnrt run {out} --locate"), text
    code, text = invoke_cli("reduce", bad, "-o", out, "--json")
    doc = json.loads(text)
    assert doc["kernels"] == 1 and doc["steps"][0]["kernels"] == [40, 1]
    assert doc["reproduce"] == f"mnrt run {out} --locate"
    code, text = invoke_cli("run", out, "--locate", "--locate-dir", tmp_path / "loc")
    assert code == 1 and "first divergent kernel (wrong)" in text
    good = tmp_path / "good.mnlb"
    binary.save(good)
    assert invoke_cli("reduce", good, "-o", out)[0] == 2
    code, text = invoke_cli("reduce", bad, "--failing")  # as DESIGN.md spells it
    assert code == 0 and (tmp_path / "bad.reduced.mnlb").exists(), text
    code, text = invoke_cli("reduce", "")  # '' is the current folder: was a ValueError
    assert code == 2 and "is a directory without a model.mnlb" in text, text


@pytest.mark.parametrize("limit", ["nan", "inf", "1e309"])
def test_a_time_limit_that_is_not_a_finite_number_is_refused(tmp_path, limit):
    # nan passed the limit's range check, and a deadline of nan is never reached.
    bad = tmp_path / "bad.mnlb"
    binary = chain_capture(4)
    perturbed(binary, weight_sites(binary)[1][2]).save(bad)
    code, text = invoke_cli("reduce", bad, "--time-limit", limit, "-o", tmp_path / "out.mnlb")
    assert code == 2 and "is not a finite number" in text, text
    assert not (tmp_path / "out.mnlb").exists()


def test_a_multi_device_binary_reduces_keeping_the_copies_and_events_the_failure_needs():
    binary = three_device_capture()
    bad = with_written(binary, "z", np.full((64, 64), 3, np.float32))
    failure = failure_of(bad)
    assert failure is not None and failure.kind == "golden mismatch"
    result = reduce(bad)
    assert failure_of(result.binary) == failure and len(result.binary) <= len(bad)
    kinds = [c.cmdType for c in result.binary.commands]
    assert U.CopyBuffer in kinds and U.RecordEvent in kinds and U.WaitEvent in kinds


def test_a_pipelined_binary_reduces_to_its_wrong_kernel_as_a_one_device_one_does(tmp_path):
    """The kernel alone on its operands, at once: the replay that takes its operands and
    the one that runs it alone (a binary that opens two devices, as this one did) give
    BLAS the share of the cores the binary's devices give each, as its capture did.
    Before, the snapshot ran on all cores, so the operands a GEMM of the second device
    read were not the failing replay's, and alone on one device the GEMM rounded
    otherwise: isolating was refused and ddmin took over (SqueezeNet over two devices:
    68 -> 29 kernels in 32 s; ResNet-50: 229 -> 112 in 402 s)."""
    binary = pipelined_binary(tmp_path)
    command, kernel, gid = weight_sites(binary)[-1]  # the last GEMM's, on the second device
    result = reduce(perturbed(binary, gid))
    assert result.failure.kind == "divergent kernel"
    assert (result.failure.site.command, result.failure.site.kernel) == (command, kernel)
    assert result.steps[0]["step"] == "isolate" and result.steps[0]["kernels"][1] == 1
    assert kernel_count(result.binary) == 1 and failure_of(result.binary) == result.failure


def test_kernels_left_keep_the_slot_views_they_name():
    binary = views_capture()  # neg a -> left, relu b -> right, neg flat -> y; views of whole
    (program,) = validate(binary).programs
    for kept, views in (([0, 2], ["left", "flat"]), ([1], ["right"]), ([0, 1], ["left", "right"])):
        smaller = with_kernels(binary, program, kept)
        assert smaller is not None, kept
        info = validate(smaller).programs[program]
        assert sorted(info.views) == sorted(views) and "whole" in info.slots
    # without the kernel writing `right`, that part of `whole` holds the device's fill
    y = mnrt.replay(with_kernels(binary, program, [0, 2])).outputs
    np.testing.assert_array_equal(next(iter(y.values())), [-3, -2, -1, 0, 1, 2, 0, 0, 0, 0])


def test_a_failing_golden_slices_through_slot_views():
    """Without fingerprints, the slice follows the failing golden back through the views:
    y reads the buffer both parts lie in, but only the part a wrong input made differs;
    the kernel writing the other part stays, as y reads what it wrote."""
    binary = views_capture()
    ids = {decoded(c.cmd.desc.name): c.cmd.bufferId for c in binary.commands
           if c.cmdType == U.CreateBuffer}  # fmt: skip
    bad = perturbed(binary, ids["a"])
    result = reduce(bad)
    assert [s["step"] for s in result.steps] == ["slice"]
    assert kernel_count(result.binary) == 3  # y reads all of the buffer, both parts
    assert result.failure.describe().startswith("golden mismatch: y")
    assert failure_of(result.binary) == result.failure
