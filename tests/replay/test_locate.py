"""Kernel fingerprints at capture and `--locate` at replay: the first divergent kernel."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from binaries import (
    light_model_binary,
    perturbed,
    three_device_capture,
    weight_sites,
    with_written,
)
from cli_harness import invoke_cli
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mnrt
from mnrt.device.kernels import registry
from mnrt.format import jsonio
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.format.fingerprints import SAMPLE, Sample, close, stats_of
from mnrt.replay.locate import ROUNDING, WRONG
from mnrt.replay.plan import validate


def _mlp_capture(
    fingerprints: bool = True, trace: bool = False, magnitude: float = 1.0, headed: bool = False
) -> mnrt.LightBinary:
    """x @ w1 -> relu (in place; with `headed`, one chain headed by the gemm) -> @ w2, then
    a scale by a third weight; with `trace`, the program also runs twice from a device
    trace. x is a standard normal sample times `magnitude`."""
    rng = np.random.default_rng(0)
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=fingerprints)
        bufs = {
            name: dev.create_buffer(shape, "float", name=name)
            for name, shape in [("x", (4, 8)), ("w1", (8, 8)), ("w2", (8, 8)), ("s", (4, 8)),
                                ("h", (4, 8)), ("y", (4, 8)), ("z", (4, 8))]
        }  # fmt: skip
        steps = '[{"op":"gemm","with":[1]},{"op":"relu"}]'
        first = (
            [mnrt.Kernel("chain", ["x", "w1"], ["h"], {"steps": steps, "x_dtype": "float",
                                                       "operand_dtypes": "float"})]
            if headed
            else [mnrt.Kernel("gemm", ["x", "w1"], ["h"]), mnrt.Kernel("relu", ["h"], ["h"])]
        )  # fmt: skip
        prog = dev.create_program(
            [
                *first,
                mnrt.Kernel("gemm", ["h", "w2"], ["y"]),
                mnrt.Kernel("mul", ["y", "s"], ["z"]),
            ],
            name="mlp",
        )
        for name in ("x", "w1", "w2", "s"):
            values = rng.standard_normal(bufs[name].shape) * (magnitude if name == "x" else 1)
            q.enqueue_write_buffer(bufs[name], values.astype(np.float32))
        q.enqueue_program(prog, bufs)
        if trace:
            tid = q.begin_trace_capture()
            q.enqueue_program(prog, bufs)
            q.end_trace_capture(tid)
            q.replay_trace(tid)
            q.replay_trace(tid)
        q.enqueue_read_buffer(bufs["z"])
        return mnrt.end_capture()


def test_host_captures_record_fingerprints_only_when_asked():
    assert _mlp_capture(fingerprints=False).fingerprints == []
    binary = _mlp_capture()
    assert binary.version == mnrt.format.FORMAT_VERSION
    assert binary.fingerprint_sample == SAMPLE
    assert [(f.kernel, f.output) for f in binary.fingerprints] == [(k, 0) for k in range(4)]
    assert len({f.command for f in binary.fingerprints}) == 1


def test_trace_replays_are_fingerprinted_kernel_by_kernel():
    binary = _mlp_capture(trace=True)
    per_command = {}
    for f in binary.fingerprints:
        per_command.setdefault(f.command, []).append(f.kernel)
    assert list(per_command.values()) == [[0, 1, 2, 3]] * 3  # the enqueue and two replays
    report = mnrt.replay(binary, locate=True)
    assert report.passed and report.locate.compared == 12 and report.locate.divergent == 0


@pytest.mark.parametrize("trace", [False, True])
def test_locate_names_exactly_the_kernel_whose_weights_were_perturbed(tmp_path, trace):
    binary = _mlp_capture(trace=trace)
    sites = weight_sites(binary)
    assert len(sites) == 4  # x, w1, w2 and s: each read by one kernel
    for command, kernel, gid in sites:
        report = mnrt.replay(perturbed(binary, gid), locate_dir=tmp_path / str(gid))
        found = report.locate.first_wrong
        assert (found.command, found.kernel) == (command, kernel)
        assert report.locate.first_divergent is found and found.verdict == WRONG


def test_locate_saves_the_inputs_both_outputs_and_the_site(tmp_path):
    binary = _mlp_capture()
    command, _, gid = next(s for s in weight_sites(binary) if s[1] == 2)  # w2: the 2nd gemm
    report = mnrt.replay(perturbed(binary, gid), locate_dir=tmp_path)
    folder = tmp_path / f"command{command}_kernel2_gemm"
    assert report.locate.saved_to == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "input.h.npy", "input.w2.npy", "output.y.reference.npy", "output.y.replayed.npy",
        "site.json",
    ]  # fmt: skip
    h, w2 = np.load(folder / "input.h.npy"), np.load(folder / "input.w2.npy")
    np.testing.assert_allclose(np.load(folder / "output.y.replayed.npy"), h @ w2, rtol=1e-5)
    np.testing.assert_allclose(np.load(folder / "output.y.reference.npy"), h @ w2, rtol=1e-5)
    site = json.loads((folder / "site.json").read_text())
    assert site["op"] == "gemm" and site["program"] == "mlp" and site["verdict"] == WRONG
    assert site["captured"][0]["hash"] != site["replayed"][0]["hash"]


def test_a_mixed_precision_chain_has_a_float64_reference_past_its_casts(tmp_path, monkeypatch):
    """A mixed compile's chains widen a half result, compute in float and round to half
    again: the reference computes every step in float64, its casts included (before, a
    chain's float cast met a double operand and the reference was refused)."""
    from mnrt.device.kernels import chain

    rng = np.random.default_rng(11)
    x, skip = rng.standard_normal((4, 8)), rng.standard_normal((4, 8))
    steps = chain.dumps([{"op": "cast", "attrs": {"to": "float"}}, {"op": "add", "with": [1]},
                         {"op": "relu"}, {"op": "cast", "attrs": {"to": "half"}}])  # fmt: skip
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=True)
        bufs = {n: dev.create_buffer((4, 8), d, name=n)
                for n, d in (("x", "half"), ("s", "float"), ("y", "half"))}  # fmt: skip
        made_for = {"x_dtype": "half", "operand_dtypes": "float"}
        kernel = mnrt.Kernel("chain", ["x", "s"], ["y"], {"steps": steps, **made_for})
        q.enqueue_write_buffer(bufs["x"], x.astype(np.float32))
        q.enqueue_write_buffer(bufs["s"], skip.astype(np.float32))
        q.enqueue_program(dev.create_program([kernel], name="block"), bufs)
        q.enqueue_read_buffer(bufs["y"])
        binary = mnrt.end_capture()
    relu = registry.lookup("relu")
    broken = dataclasses.replace(relu, compute=lambda ins, attrs, outs: [np.abs(ins[0])])
    monkeypatch.setitem(registry._REGISTRY, "relu", broken)
    report = mnrt.replay(binary, locate_dir=tmp_path)
    assert report.locate.first_wrong.op == "chain"
    folder = Path(report.locate.wrong_saved_to)
    site = json.loads((folder / "site.json").read_text())
    assert site["reference"] == "the kernel evaluated in float64 on the saved inputs"
    read = np.load(folder / "input.x.npy").astype(np.float64)
    reference = np.load(folder / "output.y.reference.npy")
    assert reference.dtype == np.float64
    # (the relu, broken to abs, is what the registry computes for the reference too)
    np.testing.assert_array_equal(reference, np.abs(read + skip.astype(np.float32)))


def test_an_in_place_kernel_saves_its_inputs_as_it_read_them(tmp_path, monkeypatch):
    """relu writes h over its input: the saved input is h before relu ran."""
    binary = _mlp_capture()
    relu = registry.lookup("relu")
    broken = dataclasses.replace(relu, compute=lambda ins, attrs, outs: [np.abs(ins[0])])
    monkeypatch.setitem(registry._REGISTRY, "relu", broken)
    report = mnrt.replay(binary, locate_dir=tmp_path)
    assert report.locate.first_wrong.op == "relu" and not report.passed
    assert report.locate.first_divergent is report.locate.first_wrong
    folder = tmp_path / f"command{report.locate.first_wrong.command}_kernel1_relu"
    before = np.load(folder / "input.h.npy")
    assert (before < 0).any()  # the gemm's output, not relu's
    np.testing.assert_array_equal(np.load(folder / "output.h.replayed.npy"), np.abs(before))
    np.testing.assert_array_equal(np.load(folder / "output.h.reference.npy"), np.abs(before))


def test_a_kernel_that_only_rounds_differently_is_not_called_wrong(monkeypatch):
    binary = _mlp_capture()
    mul = registry.lookup("mul")

    def rounding(ins, attrs, outs):
        return [np.nextafter(ins[0] * ins[1], np.float32(np.inf))]  # one ulp up

    monkeypatch.setitem(registry._REGISTRY, "mul", dataclasses.replace(mul, compute=rounding))
    report = mnrt.replay(binary, locate=True)
    assert report.locate.first_wrong is None
    assert report.locate.first_divergent.op == "mul"
    assert report.locate.first_divergent.verdict == ROUNDING


@pytest.mark.parametrize("headed", [False, True], ids=["gemm", "chain"])
@pytest.mark.parametrize("magnitude", [1e-7, 1.0, 1e7])
def test_the_verdict_holds_at_any_magnitude_of_values(monkeypatch, magnitude, headed):
    """A weight 1.25 times larger (and 0.125 more) is wrong and a GEMM summed in float64 is
    rounding, whatever the size of the values: the statistics' absolute floor is the size
    of the kernel's terms (device/tolerance.py, stats_tolerance), of a chain's head too. A
    floor of the dtype's default atol called a perturbed weight rounding in a network of
    values near 1e-7 (a random-weight EfficientNet's activations are near 1e-6)."""
    binary = _mlp_capture(magnitude=magnitude, headed=headed)
    w1 = next(g for g, b in validate(binary).buffers.items() if b.name == "w1")
    site = mnrt.replay(perturbed(binary, w1), locate=True).locate.first_divergent
    assert (site.op, site.kernel, site.verdict) == ("chain" if headed else "gemm", 0, WRONG)
    gemm = registry.lookup("gemm")

    def exact(ins, attrs, outs):
        return [np.asarray(r, np.float32) for r in gemm.compute(
            [i.astype(np.float64) for i in ins], attrs, outs)]  # fmt: skip

    monkeypatch.setitem(registry._REGISTRY, "gemm", dataclasses.replace(gemm, compute=exact))
    located = mnrt.replay(binary, locate=True).locate
    assert located.first_wrong is None
    assert located.first_divergent is None or located.first_divergent.verdict == ROUNDING


def test_a_binary_without_fingerprints_says_so():
    report = mnrt.replay(_mlp_capture(fingerprints=False), locate=True)
    assert report.passed and report.locate.fingerprints == 0
    assert "records no kernel fingerprints" in report.locate.summary()


@pytest.mark.parametrize("model", ["light_squeezenet", "light_bvlc_alexnet"])
def test_locate_names_the_perturbed_kernel_of_a_light_model_binary(tmp_path, model):
    binary = light_model_binary(model, tmp_path)
    assert binary.fingerprints  # on by default for compiled binaries
    sites = weight_sites(binary)
    for command, kernel, gid in (sites[0], sites[len(sites) // 2], sites[-1]):
        located = mnrt.replay(perturbed(binary, gid), locate=True).locate.located
        assert (located.command, located.kernel) == (command, kernel), (gid, located.describe())


def test_cli_locate_names_the_kernel_and_the_directory(tmp_path):
    binary = _mlp_capture()
    path = tmp_path / "bad.mnlb"
    command, _, gid = weight_sites(binary)[0]
    perturbed(binary, gid).save(path)
    code, out = invoke_cli("run", path, "--locate-dir", tmp_path / "loc")
    assert code == 1, out
    assert f"first divergent kernel (wrong): command {command} program 'mlp' kernel 0 'gemm'" in out
    assert str(tmp_path / "loc" / f"command{command}_kernel0_gemm") in out
    code, out = invoke_cli("run", path, "--locate", "--json", "--locate-dir", tmp_path / "l2")
    assert code == 1 and json.loads(out)["locate"]["first_wrong"]["op"] == "gemm"


def test_a_reference_that_overflows_saves_infinities_without_warnings(tmp_path):
    """The float64 reference of a kernel whose inputs overflow it computes inf, as the
    device's queues do, and numpy says nothing on stderr."""
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=True)
        a, y = (dev.create_buffer((64, 64), "float", name=n) for n in "ay")
        prog = dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])], name="e")
        q.enqueue_write_buffer(a, np.full((64, 64), 0.5, np.float32))
        q.enqueue_program(prog, {"a": a, "y": y})
        q.enqueue_read_buffer(y)
        binary = mnrt.end_capture()
    bad = with_written(binary, "a", np.full((64, 64), 1000.0, np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        located = mnrt.replay(bad, locate=True, locate_dir=tmp_path).locate.located
    assert located is not None and located.kernel == 0
    (saved,) = tmp_path.glob("*/output.y.reference.npy")
    assert np.isinf(np.load(saved)).all()


def test_capture_verify_keeps_a_capture_that_reproduces(tmp_path):
    path = tmp_path / "ok.mnlb"
    with mnrt.open_device("auto") as dev, mnrt.capture(path, verify=True):
        q = dev.command_queue(0)
        a = dev.create_buffer((3,), "float", name="a")
        q.enqueue_write_buffer(a, np.ones(3, np.float32))
        q.enqueue_read_buffer(a)
    assert mnrt.LightBinary.load(path).fingerprints == []  # nothing ran a kernel
    assert mnrt.replay(path).passed


def test_capture_verify_refuses_a_capture_that_does_not_reproduce(tmp_path, monkeypatch):
    path = tmp_path / "bad.mnlb"
    exp = registry.lookup("exp")
    refused = pytest.raises(
        mnrt.CaptureVerificationError, match=r"kernel 0 'exp'.*nothing was saved"
    )
    with refused, mnrt.open_device("auto") as dev, mnrt.capture(path, verify=True):
        q = dev.command_queue(0)
        a = dev.create_buffer((3,), "float", name="a")
        y = dev.create_buffer((3,), "float", name="y")
        prog = dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])], name="e")
        q.enqueue_write_buffer(a, np.ones(3, np.float32))
        q.enqueue_program(prog, {"a": a, "y": y})
        q.enqueue_read_buffer(y)
        # The replay that checks the capture computes exp otherwise.
        wrong = dataclasses.replace(exp, compute=lambda ins, attrs, outs: [ins[0] * 2])
        monkeypatch.setitem(registry._REGISTRY, "exp", wrong)
    assert not path.exists()


_floats = hnp.arrays(np.float32, st.integers(1, 64), elements=st.floats(-1e3, 1e3, width=32))


@given(_floats)
def test_fingerprint_statistics_agree_with_numpy(values):
    s = stats_of(values, values)
    assert (s.min, s.max, s.nonfinite) == (values.min(), values.max(), 0)
    assert s.mean == pytest.approx(values.astype(np.float64).mean(), rel=1e-5, abs=1e-3)
    assert close(s, s, 0.0, 0.0)


@given(_floats, st.sampled_from([np.nan, np.inf, -np.inf]))
def test_fingerprints_count_non_finite_values_and_summarise_the_rest(values, bad):
    with_bad = np.append(values, np.float32(bad))
    s = stats_of(with_bad, with_bad)
    assert s.nonfinite == 1 and (s.min, s.max) == (values.min(), values.max())
    assert not close(s, stats_of(values, values), 1.0, 1.0)  # a NaN appeared: wrong


@given(_floats)
def test_a_scaled_output_is_wrong_and_one_ulp_is_rounding(values):
    base = stats_of(values, values)
    ulp = np.nextafter(values, np.float32(np.inf))
    assert close(stats_of(ulp, ulp), base, 1e-5 * 64, 1e-6 * 64)
    if np.abs(values).max() > 1e-2:
        moved = values + np.float32(0.5) * np.abs(values).max()  # no value stays put
        assert not close(stats_of(moved, moved), base, 1e-5 * 64, 1e-6 * 64)


def test_a_half_precision_mean_does_not_overflow_and_an_overflowed_one_is_not_compared():
    values = np.full(30_000, 100.0, np.float16)  # sums to 3e6, past float16's 65504
    s = stats_of(values, values)
    assert s.mean == 100.0
    overflowed = s._replace(mean=float("inf"))  # as binaries captured before held it
    assert close(s, overflowed, 1e-3, 1e-3) and close(overflowed, s, 1e-3, 1e-3)
    assert not close(s._replace(max=200.0), overflowed, 1e-3, 1e-3)


def test_saved_file_names_stay_inside_the_directory(tmp_path):
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=True)
        a = dev.create_buffer((3,), "float", name="a")
        y = dev.create_buffer((3,), "float", name="y")
        prog = dev.create_program([mnrt.Kernel("exp", ["../../a"], ["y/../../y"])], name="e")
        q.enqueue_write_buffer(a, np.ones(3, np.float32))
        q.enqueue_program(prog, {"../../a": a, "y/../../y": y})
        q.enqueue_read_buffer(y)
        binary = mnrt.end_capture()
    report = mnrt.replay(perturbed(binary, weight_sites(binary, min_rank=1)[0][2]),
                         locate_dir=tmp_path / "loc")  # fmt: skip
    folder = tmp_path / "loc" / f"command{report.locate.first_wrong.command}_kernel0_exp"
    assert sorted(p.name for p in folder.iterdir()) == [
        "input.______a.npy", "output.y_______y.reference.npy", "output.y_______y.replayed.npy",
        "site.json",
    ]  # fmt: skip


def test_a_large_output_is_summarised_over_a_fixed_sample_and_hashed_whole():
    values = np.arange(1 << 20, dtype=np.float32)
    s = stats_of(values, values)
    step = values.size // SAMPLE.runs
    sample = values[: step * SAMPLE.runs].reshape(SAMPLE.runs, step)[:, : SAMPLE.run]
    assert (s.min, s.max) == (sample.min(), sample.max())
    assert s.mean == pytest.approx(sample.astype(np.float64).mean(), rel=1e-6)
    changed = values.copy()
    changed[1500] = -1.0  # outside the sample: the summary is the same, the hash is not
    t = stats_of(changed, changed)
    assert t.hash != s.hash and (t.min, t.max, t.mean) == (s.min, s.max, s.mean)
    changed[5] = np.nan  # inside it: counted
    assert stats_of(changed, changed).nonfinite == 1


def test_locate_summarises_the_sample_the_binary_records():
    """A binary says which elements its capture summarised (format 1.2's binaries, which do
    not, took 64 runs of 256): a replay's statistics are of the same ones, or a kernel that
    only rounded differently would be called wrong."""
    values = np.arange(64 * 300, dtype=np.float32)
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=True)
        x, y = (
            dev.create_buffer(values.shape, "float", name="x"),
            dev.create_buffer(values.shape, "float", name="y"),
        )
        prog = dev.create_program([mnrt.Kernel("relu", ["x"], ["y"])], name="relu")
        q.enqueue_write_buffer(x, values)
        q.enqueue_program(prog, {"x": x, "y": y})
        q.enqueue_read_buffer(y)
        binary = mnrt.end_capture()
    older = Sample(64, 256)
    assert older != SAMPLE and older.covers(values.size) and SAMPLE.covers(values.size)
    doc = json.loads(jsonio.dumps(binary))
    doc["fingerprint_runs"], doc["fingerprint_run"] = older
    captured = stats_of(values, values, older)._replace(hash=binary.fingerprints[0].stats.hash ^ 1)
    doc["fingerprints"][0].update(captured._asdict())  # diverges, by the hash alone
    report = mnrt.replay(jsonio.from_json(doc), locate=True)
    site = report.locate.first_divergent
    assert site.verdict == ROUNDING and report.locate.first_wrong is None
    assert site.replayed[0]._replace(hash=captured.hash) == captured
    assert stats_of(values, values).max < captured.max  # the sample of this mnrt is another


FORMAT_1_2 = Path(__file__).resolve().parents[2] / "samples" / "mlp_fingerprinted.mnlb"


def test_a_format_1_2_capture_is_located_over_its_own_sample(monkeypatch):
    """samples/mlp_fingerprinted.mnlb was captured by format 1.2 (64 runs of 256) on a host
    whose BLAS picked AVX2 kernels: where OpenBLAS picks AVX-512 ones, its half GEMMs sum
    in another order, so every kernel from the first GEMM on rounds differently. Either
    way no kernel is wrong (statistics over the binary's own sample agree), and a kernel
    made to round differently is only rounding."""
    binary = mnrt.LightBinary.load(FORMAT_1_2)
    assert binary.version == (1, 2) and binary.fingerprint_sample == (64, 256) != SAMPLE
    report = mnrt.replay(binary, locate=True)
    assert report.passed and report.locate.compared == len(binary.fingerprints) == 8
    assert report.locate.first_wrong is None
    exact = report.locate.divergent == 0
    assert exact or report.locate.first_divergent.verdict == ROUNDING
    gelu = registry.lookup("gelu")

    def rounding(ins, attrs, outs):
        return [np.nextafter(o, np.float32(np.inf)) for o in gelu.compute(ins, attrs, outs)]

    monkeypatch.setitem(registry._REGISTRY, "gelu", dataclasses.replace(gelu, compute=rounding))
    report = mnrt.replay(binary, locate=True)
    if exact:  # gelu is the first kernel to differ
        assert report.locate.first_divergent.op == "gelu"
    assert report.locate.first_divergent.verdict == ROUNDING
    assert report.locate.first_wrong is None


def test_a_fingerprint_sample_of_no_elements_is_refused():
    doc = json.loads(jsonio.dumps(_mlp_capture()))
    doc["fingerprint_run"] = 0
    with pytest.raises(mnrt.InvalidBinaryError, match=r"\$.fingerprint_run: must be at least 1"):
        jsonio.from_json(doc)


def test_locate_with_new_inputs_is_refused():
    binary = _mlp_capture()
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(mnrt.InvalidArgumentError, match="recorded inputs only"):
        mnrt.replay(binary, inputs={"x": x}, locate=True)


@pytest.mark.parametrize(
    ("folder", "why"),
    [
        (5, "got int"),
        (b"loc", "got bytes"),
        ("", "is empty"),
        ("l\0c", "NUL"),
        ("a.txt", "is a file"),
    ],
)
def test_a_locate_dir_that_cannot_be_a_folder_is_refused_before_the_replay(
    tmp_path, monkeypatch, folder, why
):
    """Not after replaying to the divergent kernel; and "" is not the current directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("kept")
    binary = _mlp_capture()
    bad = perturbed(binary, weight_sites(binary)[0][2])
    ran = []
    with pytest.raises(mnrt.InvalidArgumentError, match=f"locate_dir .*{why}"):
        mnrt.replay(bad, locate_dir=folder, progress=lambda done, loops: ran.append(done))
    assert not ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def _three_devices_with(tmp_path, buffer: str) -> tuple[mnrt.LightBinary, int]:
    """The three-device capture with fingerprints and the data written to `buffer`
    perturbed, and the index of the command that runs the program of device 0."""
    binary = three_device_capture(fingerprints=True)
    plan = validate(binary, blobs=False)
    gid = next(g for g, b in plan.buffers.items() if b.name == buffer)
    programs = [i for i, c in enumerate(binary.commands) if c.cmdType == U.EnqueueProgram]
    return perturbed(binary, gid), programs[0]


def test_locate_follows_several_devices_in_command_order(tmp_path):
    """x on device 0 is perturbed: its exp diverges, and so does device 1's add of what exp
    computed (copied over). exp comes first in command order, whichever finishes first."""
    bad, exp_command = _three_devices_with(tmp_path, "x")
    for _ in range(5):
        report = mnrt.replay(bad, locate_dir=tmp_path / "loc")
        located = report.locate
        assert (located.compared, located.divergent) == (2, 2)
        assert located.first_divergent.op == "exp" and located.first_wrong.op == "exp"
        assert located.first_divergent.command == exp_command
        assert located.saved_to == str(tmp_path / "loc" / f"command{exp_command}_kernel0_exp")
    assert [p.name for p in (tmp_path / "loc").iterdir()] == [f"command{exp_command}_kernel0_exp"]


def test_locate_names_a_later_devices_kernel_when_the_first_matches(tmp_path):
    """z on device 2 is perturbed: device 0's exp matches; device 1's add, which reads the
    copy of z, is the first to diverge."""
    bad, _ = _three_devices_with(tmp_path, "z")
    located = mnrt.replay(bad, locate=True).locate
    assert (located.compared, located.divergent) == (2, 1)
    assert located.first_divergent.op == "add" and located.first_divergent.verdict == WRONG


def test_a_device_error_on_one_of_several_devices_names_its_kernel(monkeypatch):
    binary = three_device_capture(fingerprints=True)
    add = registry.lookup("add")

    def broken(ins, attrs, outs):
        raise mnrt.DeviceExecutionError("the add unit is broken")

    monkeypatch.setitem(registry._REGISTRY, "add", dataclasses.replace(add, compute=broken))
    with pytest.raises(mnrt.DeviceError) as raised:
        mnrt.replay(binary, locate=True)
    failed = raised.value.report.locate.failed
    assert failed is not None and failed.op == "add"


def test_cli_locate_on_several_devices_names_the_kernel(tmp_path):
    bad, exp_command = _three_devices_with(tmp_path, "x")
    path = tmp_path / "three.mnlb"
    bad.save(path)
    code, out = invoke_cli("run", path, "--locate", "--locate-dir", tmp_path / "loc")
    assert code == 1, out
    assert f"first divergent kernel (wrong): command {exp_command} program" in out


def test_capture_verify_of_several_devices_keeps_a_capture_that_reproduces(tmp_path):
    path = tmp_path / "two.mnlb"
    d0, d1 = mnrt.open_device(0), mnrt.open_device(1)
    try:
        with mnrt.capture(path, verify=True):
            q0, q1 = d0.command_queue(0), d1.command_queue(0)
            a = d0.create_buffer((4,), "float", name="a")
            b = d1.create_buffer((4,), "float", name="b")
            q0.enqueue_write_buffer(a, np.arange(4, dtype=np.float32))
            q0.enqueue_copy_buffer(a, b)
            q1.wait_event(q0.record_event())
            q1.enqueue_read_buffer(b)
    finally:
        d0.close()
        d1.close()
    assert mnrt.replay(path).passed


def _cast_then_gemm() -> tuple[mnrt.LightBinary, int]:
    """x (float) cast to half, then a GEMM of it with w (half) into y (float); and x's
    buffer id."""
    rng = np.random.default_rng(3)
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=True)
        x = dev.create_buffer((16, 64), "float", name="x")
        xh = dev.create_buffer((16, 64), "half", name="xh")
        w = dev.create_buffer((64, 32), "half", name="w")
        y = dev.create_buffer((16, 32), "float", name="y")
        prog = dev.create_program(
            [
                mnrt.Kernel("cast", ["x"], ["xh"], {"to": "half"}),
                mnrt.Kernel("gemm", ["xh", "w"], ["y"]),
            ],
            name="p",
        )
        q.enqueue_write_buffer(x, rng.standard_normal((16, 64)).astype(np.float32))
        q.enqueue_write_buffer(w, rng.standard_normal((64, 32)).astype(np.float32) / 8)
        q.enqueue_program(prog, {"x": x, "xh": xh, "w": w, "y": y})
        q.enqueue_read_buffer(y)
        binary = mnrt.end_capture()
    return binary, next(g for g, b in validate(binary).buffers.items() if b.name == "x")


def test_a_kernel_that_sums_nothing_is_wrong_wherever_it_diverges():
    """The verdict holds an output to what the tolerance model lets rounding move it: a
    cast reads bits that matched and sums nothing, so its output differing at all is
    wrong. Held to 64x the dtype's default tolerance instead, a half output could move
    by a quarter of its scale and count as rounding: an input 0.125 larger did."""
    binary, x = _cast_then_gemm()
    site = mnrt.replay(perturbed(binary, x, scale=1.0), locate=True).locate.first_divergent
    assert (site.op, site.verdict) == ("cast", WRONG)


def test_a_gemm_that_sums_in_another_order_is_only_rounding(monkeypatch):
    """The same binary on a host whose BLAS sums more exactly (float64): the GEMM's bits
    differ from its fingerprint, within the tolerance model's bound."""
    binary, _ = _cast_then_gemm()
    gemm = registry.lookup("gemm")

    def exact(ins, attrs, outs):
        return [np.asarray(r, np.float32) for r in gemm.compute(
            [i.astype(np.float64) for i in ins], attrs, outs)]  # fmt: skip

    monkeypatch.setitem(registry._REGISTRY, "gemm", dataclasses.replace(gemm, compute=exact))
    report = mnrt.replay(binary, locate=True)
    site = report.locate.first_divergent
    assert (site.op, site.verdict) == ("gemm", ROUNDING) and report.locate.first_wrong is None


@pytest.mark.parametrize("dtype", ["half", "bfloat16", "float16"])
def test_a_result_in_each_16_bit_float_replays_with_its_golden_and_fingerprint(dtype):
    """A kernel's output stored as 16-bit bits (bfloat16's numpy has no finfo for) gets
    its tolerance and its verdict from the dtype's own precision: the validator raised
    numpy's ValueError for a bfloat16 output, and `mnrt run` printed a traceback."""
    rng = np.random.default_rng(0)
    with mnrt.open_device(0) as dev:
        q = dev.command_queue()
        mnrt.begin_capture(fingerprints=True)
        x = dev.create_buffer((8, 16), "float", name="x")
        w = dev.create_buffer((16, 4), "float", name="w")
        y = dev.create_buffer((8, 4), "float", name="y")
        z = dev.create_buffer((8, 4), dtype, name="z")
        prog = dev.create_program(
            [
                mnrt.Kernel("gemm", ["x", "w"], ["y"]),
                mnrt.Kernel("cast", ["y"], ["z"], {"to": dtype}),
            ]
        )
        q.enqueue_write_buffer(x, rng.standard_normal((8, 16)).astype(np.float32))
        q.enqueue_write_buffer(w, rng.standard_normal((16, 4)).astype(np.float32))
        q.enqueue_program(prog, {"x": x, "w": w, "y": y, "z": z})
        q.enqueue_read_buffer(z)
        binary = mnrt.end_capture()
    report = mnrt.replay(binary, locate=True)
    assert report.passed and report.locate.compared == 2 and report.locate.divergent == 0
    check = report.checks[0]
    assert 0.0 < check.rtol <= 2.0**-6 and check.atol > 0.0  # rounding allowed, not exact
