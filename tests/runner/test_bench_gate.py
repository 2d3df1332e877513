"""`mnrt bench --json` modelled figures and the `--baseline` performance gate."""

from __future__ import annotations

import contextlib
import json
import os
import threading

import pytest
from binaries import chain_capture
from cli_harness import assert_one_line_error, invoke_cli

from mnrt.runner import bench


def _bench(*args) -> tuple[int, str]:
    return invoke_cli("bench", *args, "--loops", 1)


def test_bench_json_has_modelled_time_energy_per_kernel_and_host_timings(tmp_path):
    path = tmp_path / "c.mnlb"
    chain_capture(12).save(path)
    code, out = _bench(path, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["passed"] and doc["wall_min_s"] > 0
    m = doc["modelled"]
    assert m["makespan_s"] > 0 and m["energy_j"] > 0 and len(m["kernels"]) == 12
    assert sum(k["time_s"] for k in m["kernels"]) <= m["makespan_s"] * (1 + 1e-9)
    assert {k["op"] for k in m["kernels"]} == {"mul", "add"}


def test_baseline_gate_passes_unchanged_and_names_the_kernels_that_got_slower(tmp_path):
    path, base = tmp_path / "c.mnlb", tmp_path / "base.json"
    chain_capture(12).save(path)
    base.write_text(_bench(path, "--json")[1])
    code, out = _bench(path, "--baseline", base)
    assert code == 0 and "no regression beyond 2.0%" in out
    doc = json.loads(base.read_text())
    doc["modelled"]["makespan_s"] *= 0.9
    doc["modelled"]["kernels"][3]["time_s"] *= 0.5  # kernel 3 was twice as fast
    base.write_text(json.dumps(doc))
    code, out = _bench(path, "--baseline", base)
    assert code == 1 and "REGRESSION beyond 2.0%: makespan_s" in out
    assert "slower: command" in out and "kernel 3 'add'" in out and out.count("slower:") == 1
    code, out = _bench(path, "--baseline", base, "--tolerance", "0.5")
    assert code == 0, out  # 11% is within 50%; the kernel's 100% is not, but totals decide
    code, out = _bench(path, "--baseline", base, "--json")
    assert code == 1 and json.loads(out)["regression"]["slower_kernels"][0]["op"] == "add"


def test_kernels_that_got_slower_fail_the_gate_where_the_makespan_hides_them(tmp_path):
    """A binary whose makespan is mostly its weights' upload: kernels 25% slower move the
    makespan by 1%, within the tolerance; their summed time is gated on its own, and so is
    their summed energy."""
    path, base = tmp_path / "c.mnlb", tmp_path / "base.json"
    chain_capture(12).save(path)
    doc = json.loads(_bench(path, "--json")[1])
    for k in doc["modelled"]["kernels"]:
        k["time_s"] *= 0.8
    doc["modelled"]["makespan_s"] *= 0.99
    base.write_text(json.dumps(doc))
    code, out = _bench(path, "--baseline", base)
    assert code == 1 and "REGRESSION beyond 2.0%: kernels' time_s" in out, out
    assert "makespan_s" not in out and out.count("slower:") == 12
    code, out = _bench(path, "--baseline", base, "--tolerance", "0.3")
    assert code == 0, out
    doc = json.loads(_bench(path, "--json")[1])
    for k in doc["modelled"]["kernels"]:
        k["energy_j"] *= 0.8  # as fast as now, on less energy
    doc["modelled"]["energy_j"] *= 0.99
    base.write_text(json.dumps(doc))
    code, out = _bench(path, "--baseline", base, "--json")
    assert code == 1 and [t.split(" ")[:2] for t in json.loads(out)["regression"]["totals"]] == [
        ["kernels'", "energy_j"]
    ]


def test_the_gate_pairs_each_kernel_with_its_own_across_a_kernel_added_before_it(tmp_path):
    """A baseline of a binary without the current one's first kernel (as a compile that adds
    one, or another preset's fusion, leaves it): each kernel is still compared with its own
    (the ops of each program aligned as a text diff is), not with the kernel at its old
    position."""
    path, base = tmp_path / "c.mnlb", tmp_path / "base.json"
    chain_capture(12).save(path)
    doc = json.loads(_bench(path, "--json")[1])
    kernels = doc["modelled"]["kernels"][1:]  # the baseline lacked kernel 0, a 'mul'
    for k in kernels:
        k["kernel"] -= 1
        k["program_kernel"] -= 1
    kernels[2]["time_s"] *= 0.5  # the current kernel 3, an 'add', was twice as fast
    doc["modelled"].update(kernels=kernels, makespan_s=doc["modelled"]["makespan_s"] * 0.9)
    base.write_text(json.dumps(doc))
    code, out = _bench(path, "--baseline", base, "--json")
    slower = json.loads(out)["regression"]["slower_kernels"]
    assert code == 1 and [(k["program_kernel"], k["op"]) for k in slower] == [(3, "add")]
    assert slower[0]["baseline_time_s"] == kernels[2]["time_s"]
    added = json.loads(out)["regression"]["added_kernels"]
    assert [(k["program_kernel"], k["op"]) for k in added] == [(0, "mul")]


def test_a_regression_that_is_all_new_kernels_names_them(tmp_path):
    """No kernel got slower, the current run has more of them: the gate names those the
    baseline has no counterpart of (ten, then how many more and their time)."""
    path, base = tmp_path / "c.mnlb", tmp_path / "base.json"
    chain_capture(24).save(path)
    doc = json.loads(_bench(path, "--json")[1])
    kept = doc["modelled"]["kernels"][:12]
    doc["modelled"].update(kernels=kept, makespan_s=sum(k["time_s"] for k in kept))
    base.write_text(json.dumps(doc))
    code, out = _bench(path, "--baseline", base)
    assert code == 1 and "REGRESSION beyond 2.0%: makespan_s" in out and "slower:" not in out
    assert out.count("not in the baseline") == 11 and "2 more kernel runs not in" in out
    assert "  added: command " in out and "kernel 12 " in out


NOT_BENCH_JSON = {
    "no totals": lambda m: m.clear(),
    "not JSON": "{",
    "nested too deeply": "[" * 100_000 + "]" * 100_000,  # json: RecursionError
    "a list": [],
    "time as text": lambda m: m.update(makespan_s="fast"),
    "negative time": lambda m: m.update(makespan_s=-1.0),
    "time true": lambda m: m.update(makespan_s=True),
    "energy a list": lambda m: m.update(energy_j=[1.0]),
    "kernels a dict": lambda m: m.update(kernels={"a": 1}),
    "kernels numbers": lambda m: m.update(kernels=[1, 2]),
    "kernel without program": lambda m: m["kernels"][0].pop("program"),
    "kernel time text": lambda m: m["kernels"][1].update(time_s="a"),
    "kernel time infinite": lambda m: m["kernels"][2].update(time_s=float("inf")),
    "kernel energy negative": lambda m: m["kernels"][1].update(energy_j=-1.0),
    "kernel index text": lambda m: m["kernels"][0].update(program_kernel="0"),
}


@pytest.mark.parametrize("case", NOT_BENCH_JSON)
def test_a_baseline_that_is_not_bench_json_is_a_usage_error(tmp_path, case):
    """Every field the gate reads is checked before any is used: an edited or foreign
    baseline is a one-line usage error, never a traceback or a verdict on nonsense."""
    path, base = tmp_path / "c.mnlb", tmp_path / "base.json"
    chain_capture(3).save(path)
    doc = json.loads(_bench(path, "--json")[1])
    edit = NOT_BENCH_JSON[case]
    if callable(edit):
        edit(doc["modelled"])
        base.write_text(json.dumps(doc))
    else:
        base.write_text(edit if isinstance(edit, str) else json.dumps(edit))
    assert_one_line_error(*_bench(path, "--baseline", base), "nor the JSON `mnrt bench")
    assert_one_line_error(
        *_bench(path, "--baseline", tmp_path / "no.json"), "cannot read --baseline"
    )


def _piped(data: bytes) -> tuple[str, threading.Thread]:
    """A pipe as a shell's `<(command)` gives it: /dev/fd/N, its writer writing `data`
    (bytes, or a repeated chunk without end when a list of one), then closing it."""
    read_end, write_end = os.pipe()

    def write() -> None:
        with os.fdopen(write_end, "wb") as w, contextlib.suppress(BrokenPipeError):
            if isinstance(data, list):
                while True:
                    w.write(data[0])
            w.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return f"/dev/fd/{read_end}", writer


def test_a_baseline_may_come_through_a_pipe(tmp_path):
    """`mnrt bench B --baseline <(mnrt bench A --json)`: it was refused as "not a regular
    file"."""
    path = tmp_path / "c.mnlb"
    chain_capture(12).save(path)
    doc = json.loads(_bench(path, "--json")[1])
    pipe, writer = _piped(json.dumps(doc).encode())
    code, out = _bench(path, "--baseline", pipe)
    assert code == 0 and "no regression beyond 2.0%" in out, out
    writer.join()
    doc["modelled"]["makespan_s"] *= 0.9
    pipe, writer = _piped(json.dumps(doc).encode())
    code, out = _bench(path, "--baseline", pipe)
    assert code == 1 and "REGRESSION beyond 2.0%: makespan_s" in out, out
    writer.join()


def test_a_baseline_that_never_ends_or_never_comes_is_refused_not_waited_for(
    tmp_path, fifo, monkeypatch
):
    """/dev/zero was read for ever, and a FIFO waited for a writer: the device is refused,
    a pipe is read no further than the longest JSON the gate takes, and a FIFO nothing
    writes to reads as empty. A light binary cannot be replayed from a pipe."""
    monkeypatch.setattr(bench, "MAX_BASELINE_JSON", 1 << 16)
    path = tmp_path / "c.mnlb"
    chain_capture(3).save(path)
    assert_one_line_error(*_bench(path, "--baseline", "/dev/zero"), "is not a regular file")
    pipe, _ = _piped([b"x" * 4096])
    assert_one_line_error(*_bench(path, "--baseline", pipe), "holds more than 65536 bytes")
    assert_one_line_error(*_bench(path, "--baseline", fifo), "nor the JSON `mnrt bench")
    pipe, writer = _piped(path.read_bytes())
    assert_one_line_error(*_bench(path, "--baseline", pipe), "is a light binary in a pipe")
    writer.join()


@pytest.mark.parametrize("tolerance", ["nan", "inf"])
def test_a_tolerance_that_is_not_a_finite_number_is_refused(tmp_path, tolerance):
    # nan passed the range check, and no growth is beyond a tolerance of nan: the gate
    # passed every regression.
    path, base = tmp_path / "c.mnlb", tmp_path / "base.json"
    chain_capture(3).save(path)
    base.write_text(_bench(path, "--json")[1])
    code, out = _bench(path, "--baseline", base, "--tolerance", tolerance)
    assert code == 2 and "is not a finite number" in out, out


def test_a_baseline_may_be_another_binary_replayed_for_its_figures(tmp_path):
    """Two compiles gated against each other with no JSON in between: the baseline binary
    (or the codegen_dir holding it) is replayed once, and the verdict is the one its
    `--json` gives. A binary that is not valid is named as the baseline."""
    fast, slow = tmp_path / "fast.mnlb", tmp_path / "slow.mnlb"
    chain_capture(12).save(fast)
    chain_capture(14).save(slow)  # two kernels more: slower
    base = tmp_path / "fast.json"
    base.write_text(_bench(fast, "--json")[1])
    for baseline in (fast, base):
        code, out = _bench(slow, "--baseline", baseline, "--json")
        assert code == 1, out
        regression = json.loads(out)["regression"]
        assert regression["totals"] and len(regression["added_kernels"]) == 2
    (tmp_path / "cg").mkdir()
    slow.rename(tmp_path / "cg" / "model.mnlb")
    code, out = _bench(fast, "--baseline", tmp_path / "cg")
    assert code == 0 and "no regression beyond 2.0%" in out, out
    broken = tmp_path / "broken.mnlb"
    broken.write_bytes(fast.read_bytes()[:200])
    assert_one_line_error(*_bench(fast, "--baseline", broken), f"--baseline {broken}:")
