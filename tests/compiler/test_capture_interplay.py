"""Compiling while a capture runs, and compiling on several threads at once: writing a
codegen_dir or a cache entry records its own light binary, which must neither fail the
compile nor slip the compiled function's extra run into the user's capture."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from graph_harness import mlp_input as x_data
from graph_harness import small_mlp as mlp

import mnrt
from mnrt.capture.recorder import Recorder
from mnrt.compiler import compiled as compiled_module
from mnrt.compiler import goldens
from mnrt.host import observe
from mnrt.replay.executor import COMMAND_NAMES

capture_module = sys.modules["mnrt.capture"]  # mnrt.capture is the context manager

HANG_S = 60  # a hang guard, not a timing


def calls(path) -> list[str]:
    return [COMMAND_NAMES[c.cmdType] for c in mnrt.LightBinary.load(path).commands]


def test_a_cache_miss_inside_a_capture_compiles_stores_and_captures_only_the_users_run(
    ctx, tmp_path
):
    cache = mnrt.CacheOptions(tmp_path / "cache")
    with mnrt.capture(tmp_path / "user.mnlb"):
        compiled = ctx.compile(mlp(np.random.default_rng(7)), {"x": x_data()}, cache_options=cache)
        want = compiled({"x": x_data()})["y"].cpu()
    assert calls(tmp_path / "user.mnlb").count("enqueue_program") == 1  # the user's call only
    assert mnrt.replay(tmp_path / "user.mnlb").passed
    (entry,) = (tmp_path / "cache").iterdir()
    assert not (entry / "model.mnlb").exists()
    phases = json.loads((entry / "report.json").read_text())["phases"]
    (binary,) = [p for p in phases if p["name"] == "light binary"]
    assert binary["status"].startswith("skipped: a capture is running")
    # The entry loads: a compile after the capture uses it.
    stamp = (entry / "graph.json").stat().st_mtime_ns
    again = ctx.compile(mlp(np.random.default_rng(7)), {"x": x_data()}, cache_options=cache)
    np.testing.assert_array_equal(again({"x": x_data()})["y"].cpu(), want)
    assert (entry / "graph.json").stat().st_mtime_ns == stamp


def test_a_codegen_dir_written_inside_a_capture_says_why_it_has_no_binary(ctx, tmp_path):
    with mnrt.capture(tmp_path / "user.mnlb"):
        ctx.compile(mlp(np.random.default_rng(7)), {"x": x_data()}, codegen_dir=tmp_path / "cg")
    assert "enqueue_program" not in calls(tmp_path / "user.mnlb")
    assert not (tmp_path / "cg" / "model.mnlb").exists()
    assert (tmp_path / "cg" / "option.json").is_file()
    report = json.loads((tmp_path / "cg" / "report.json").read_text())
    assert any(p["status"].startswith("skipped: a capture is running") for p in report["phases"])


def test_save_binary_inside_a_capture_says_to_call_it_after_end_capture(ctx, tmp_path):
    compiled = ctx.compile(mlp(np.random.default_rng(7)), {"x": x_data()})
    with (
        mnrt.capture(tmp_path / "user.mnlb"),
        pytest.raises(mnrt.CaptureError, match="after end_capture"),
    ):
        compiled.save_binary(tmp_path / "model.mnlb")
    assert not (tmp_path / "model.mnlb").exists()


def test_threads_compiling_into_codegen_dirs_at_once_all_get_their_binaries(tmp_path):
    failures: list[BaseException] = []
    start = threading.Barrier(3)

    def work(i: int) -> None:
        try:
            with mnrt.Context() as c:
                start.wait(HANG_S)
                for j in range(3):
                    c.compile(mlp(np.random.default_rng(i)), {"x": x_data()},
                              codegen_dir=tmp_path / f"cg{i}-{j}")  # fmt: skip
        except BaseException as e:  # reported below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert not failures, failures
    for folder in tmp_path.iterdir():
        assert mnrt.replay(folder / "model.mnlb").passed, folder


def test_a_capture_begun_on_another_thread_while_a_compile_prepares_its_binary(
    tmp_path, monkeypatch
):
    # The user's capture begins after the compile saw none and before its own begins (the
    # reference computation, paused here, is the longest step between): the compile writes
    # its codegen_dir without the binary, as it would have had it seen the capture at once.
    in_reference, user_began = threading.Event(), threading.Event()
    reference = goldens.reference

    def slow_reference(compiled, inputs):
        in_reference.set()
        user_began.wait(HANG_S)
        return reference(compiled, inputs)

    monkeypatch.setattr(goldens, "reference", slow_reference)
    failures: list[BaseException] = []

    def compile_into_codegen_dir() -> None:
        try:
            with mnrt.Context() as c:
                c.compile(mlp(np.random.default_rng(7)), {"x": x_data()},
                          codegen_dir=tmp_path / "cg")  # fmt: skip
        except BaseException as e:  # reported below
            failures.append(e)

    t = threading.Thread(target=compile_into_codegen_dir)
    t.start()
    assert in_reference.wait(HANG_S)
    with mnrt.capture(tmp_path / "user.mnlb"):
        user_began.set()
        t.join(HANG_S)
    assert not failures, failures
    assert not (tmp_path / "cg" / "model.mnlb").exists()


@contextlib.contextmanager
def a_compile_recording(tmp_path, monkeypatch) -> Iterator[Callable]:
    """A compile on another thread, paused inside its codegen_dir binary's capture until
    the block ends; the block gets the unpaused compare_to_golden."""
    inside, release = threading.Event(), threading.Event()
    compare = goldens.compare_to_golden

    def paused_compare(*args, **kwargs):
        inside.set()
        release.wait(HANG_S)
        return compare(*args, **kwargs)

    monkeypatch.setattr(goldens, "compare_to_golden", paused_compare)

    def compile_into_codegen_dir() -> None:
        with mnrt.Context() as c:
            c.compile(mlp(np.random.default_rng(7)), {"x": x_data()}, codegen_dir=tmp_path / "a")

    t = threading.Thread(target=compile_into_codegen_dir)
    t.start()
    try:
        assert inside.wait(HANG_S)
        yield compare
    finally:
        release.set()
        t.join(HANG_S)


def test_a_child_forked_while_a_thread_records_a_binary_can_still_record_its_own(
    tmp_path, monkeypatch
):
    with a_compile_recording(tmp_path, monkeypatch) as compare:
        pid = os.fork()
        if pid == 0:  # exit 3: the child hung on the lock its parent's thread held
            signal.signal(signal.SIGALRM, lambda *a: os._exit(3))
            signal.alarm(HANG_S)
            monkeypatch.setattr(goldens, "compare_to_golden", compare)
            code = 5
            try:
                inherited = isinstance(observe.current(), Recorder)  # its parent thread's
                with mnrt.Context() as c:
                    c.compile(mlp(np.random.default_rng(8)), {"x": x_data()},
                              codegen_dir=tmp_path / "child")  # fmt: skip
                code = 2 * inherited + 4 * (not (tmp_path / "child" / "model.mnlb").is_file())
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_codegen_dir_written_again_inside_a_capture_keeps_no_earlier_binary(ctx, tmp_path):
    cg = tmp_path / "cg"
    ctx.compile(mlp(np.random.default_rng(1)), {"x": x_data()}, codegen_dir=cg)
    assert (cg / "model.mnlb").is_file()
    with mnrt.capture(tmp_path / "user.mnlb"):
        ctx.compile(mlp(np.random.default_rng(2)), {"x": x_data()}, codegen_dir=cg)
    assert not (cg / "model.mnlb").exists()  # the first model's binary is not this one's


def test_putting_the_inputs_back_is_never_recorded(ctx, tmp_path, monkeypatch):
    # A capture another thread begins just as save_binary's own ends must not record the
    # compiler putting the function's inputs back.
    compiled = ctx.compile(mlp(np.random.default_rng(3)), {"x": x_data()})
    put_back = compiled_module._put_back

    def after_another_thread_began(q, held):
        t = threading.Thread(target=mnrt.begin_capture)
        t.start()
        t.join(HANG_S)
        put_back(q, held)

    monkeypatch.setattr(compiled_module, "_put_back", after_another_thread_began)
    try:
        compiled.save_binary(tmp_path / "m.mnlb")
    finally:
        user = mnrt.end_capture()
    assert [COMMAND_NAMES[c.cmdType] for c in user.commands] == []


def test_a_capture_begun_while_a_compile_records_says_whose_capture_runs(tmp_path, monkeypatch):
    with (
        a_compile_recording(tmp_path, monkeypatch),
        pytest.raises(mnrt.CaptureError, match="compiled graph 'mlp' is recording"),
    ):
        mnrt.begin_capture()


def test_a_child_forked_while_another_thread_begins_a_capture_can_capture():
    held, release = threading.Event(), threading.Event()

    def holder() -> None:  # as a thread inside begin_capture or end_capture would
        with capture_module._lock:
            held.set()
            release.wait(HANG_S)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(HANG_S)
    pid = os.fork()
    if pid == 0:  # exit 3: the child hung on the lock its parent's thread held
        signal.signal(signal.SIGALRM, lambda *a: os._exit(3))
        signal.alarm(HANG_S)
        try:
            mnrt.begin_capture()
            mnrt.end_capture()
        finally:
            os._exit(0)
    release.set()
    t.join(HANG_S)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_save_binary_takes_every_input_or_none(ctx, tmp_path):
    compiled = ctx.compile(mlp(np.random.default_rng(3)), {"x": x_data()})
    with pytest.raises(mnrt.InvalidArgumentError, match="save_binary inputs must be exactly x"):
        compiled.save_binary(tmp_path / "m.mnlb", inputs={})
    assert not (tmp_path / "m.mnlb").exists()


def test_save_binary_of_an_onnx_model_takes_every_input(ctx, tmp_path):
    helper = pytest.importorskip("onnx.helper")
    from onnx import TensorProto

    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "xyz"]
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "g", info[:2],
                              info[2:])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    a = np.ones((2, 3), np.float32)
    compiled = ctx.compile(model, {"x": a, "y": a})
    with pytest.raises(mnrt.InvalidArgumentError, match="missing y"):
        compiled.save_binary(tmp_path / "m.mnlb", inputs={"x": a})


def test_a_codegen_dir_that_cannot_be_written_is_a_clear_error(ctx, tmp_path):
    (tmp_path / "cg" / "report.json").mkdir(parents=True)  # a directory where a file goes
    with pytest.raises(
        mnrt.InvalidArgumentError, match="cannot write .*report.json: it is a directory"
    ):
        ctx.compile(mlp(np.random.default_rng(1)), {"x": x_data()}, codegen_dir=tmp_path / "cg")
