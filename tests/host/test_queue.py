"""Command queues: transfers, programs, asynchrony, device-side errors, threads, stats."""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from collections import deque

import numpy as np
import pytest
from binaries import concat_in_place
from host_harness import gather_program

import mnrt
from mnrt.device.cost import Modelled
from mnrt.device.numerics import round_to_half
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.host.commands import Command


@pytest.mark.parametrize(
    ("dtype", "np_dtype"),
    [
        ("double", np.float64),
        ("float", np.float32),
        ("float16", np.float16),
        ("int32", np.int32),
        ("uint8", np.uint8),
        ("bool", np.bool_),
    ],
)
def test_write_read_round_trip_is_exact(dev, q, dtype, np_dtype):
    data = (np.arange(24).reshape(2, 3, 4) % 7).astype(np_dtype)
    b = dev.create_buffer(data.shape, dtype)
    q.enqueue_write_buffer(b, data)
    out = q.enqueue_read_buffer(b)
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out, data)


@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64])
def test_half_buffer_rounds_like_the_device_and_reads_float32(dev, q, src):
    data = np.random.default_rng(0).standard_normal((5, 7)).astype(src)
    b = dev.create_buffer(data.shape, mnrt.half)
    q.enqueue_write_buffer(b, data, blocking=True)
    out = q.enqueue_read_buffer(b)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, round_to_half(data))


def test_write_rejects_wrong_shape_dtype_and_non_arrays(dev, q):
    b = dev.create_buffer((2, 3), "float", name="w")
    with pytest.raises(mnrt.ShapeError, match=r"shape \(3, 2\).*'w'.*reshape"):
        q.enqueue_write_buffer(b, np.zeros((3, 2), np.float32))
    with pytest.raises(mnrt.DTypeError, match=r"float64.*'w'.*astype"):
        q.enqueue_write_buffer(b, np.zeros((2, 3)))
    with pytest.raises(mnrt.InvalidArgumentError, match="numpy array"):
        q.enqueue_write_buffer(b, [[0.0] * 3] * 2)
    h = dev.create_buffer((2,), "half")
    with pytest.raises(mnrt.DTypeError, match="float16, float32 or float64"):
        q.enqueue_write_buffer(h, np.zeros(2, np.int32))
    with pytest.raises(mnrt.InvalidArgumentError, match="blocking"):
        q.enqueue_write_buffer(h, np.zeros(2, np.float32), blocking="yes")


def test_non_blocking_read_is_valid_after_finish(dev, q):
    b = dev.create_buffer((1000,), "float")
    data = np.arange(1000, dtype=np.float32)
    q.enqueue_write_buffer(b, data)
    out = q.enqueue_read_buffer(b, blocking=False)
    q.finish()
    np.testing.assert_array_equal(out, data)


def _mlp(dev):
    names = {"x": (4, 8), "w": (8, 3), "h": (4, 3), "y": (4, 3)}
    bufs = {k: dev.create_buffer(s, "float", name=k) for k, s in names.items()}
    prog = dev.create_program(
        [mnrt.Kernel("gemm", ["x", "w"], ["h"]), mnrt.Kernel("relu", ["h"], ["y"])], name="mlp"
    )
    return bufs, prog


def test_program_runs_in_order_and_matches_numpy(dev, q):
    bufs, prog = _mlp(dev)
    assert prog.slots == ("x", "w", "h", "y")
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 3), np.float32)
    q.enqueue_write_buffer(bufs["x"], x)
    q.enqueue_write_buffer(bufs["w"], w)
    q.enqueue_program(prog, bufs)
    np.testing.assert_array_equal(q.enqueue_read_buffer(bufs["y"]), np.maximum(x @ w, 0))


def test_in_place_slot(dev, q):
    b = dev.create_buffer((3,), "float", name="acc")
    one = dev.create_buffer((1,), "float", name="one")
    prog = dev.create_program([mnrt.Kernel("add", ["acc", "one"], ["acc"])])
    q.enqueue_write_buffer(b, np.zeros(3, np.float32))
    q.enqueue_write_buffer(one, np.ones(1, np.float32))
    for _ in range(5):
        q.enqueue_program(prog, {"acc": b, "one": one})
    np.testing.assert_array_equal(q.enqueue_read_buffer(b), [5, 5, 5])


def test_binding_errors_raise_at_enqueue(dev, q):
    bufs, prog = _mlp(dev)
    partial = {k: v for k, v in bufs.items() if k != "h"}
    with pytest.raises(mnrt.BindingError, match="unbound slot.*'h'"):
        q.enqueue_program(prog, partial)
    with pytest.raises(mnrt.BindingError, match="unknown slot.*'z'"):
        q.enqueue_program(prog, {**bufs, "z": bufs["x"]})
    with pytest.raises(mnrt.BindingError, match="expected a Buffer"):
        q.enqueue_program(prog, {**bufs, "x": np.zeros((4, 8))})
    wrong = dev.create_buffer((4, 4), "float", name="wrong")
    with pytest.raises(mnrt.ShapeError, match=r"kernel 1 'relu'.*'wrong'.*\(4, 3\)"):
        q.enqueue_program(prog, {**bufs, "y": wrong})
    bad_in = dev.create_buffer((4, 9), "float", name="bad_in")
    with pytest.raises(mnrt.ShapeError, match="kernel 0 'gemm'.*inner dimensions"):
        q.enqueue_program(prog, {**bufs, "x": bad_in})
    as_half = dev.create_buffer((4, 3), "half", name="as_half")
    with pytest.raises(mnrt.DTypeError, match="produces float"):
        q.enqueue_program(prog, {**bufs, "y": as_half})
    # Inferred shapes and prices are remembered across programs; errors never are.
    again = dev.create_program(list(prog.kernels), name="again")
    for p in (prog, again):
        with pytest.raises(mnrt.ShapeError, match="kernel 0 'gemm'.*inner dimensions"):
            q.enqueue_program(p, {**bufs, "x": bad_in})
    q.enqueue_program(again, bufs)
    q.finish()


def test_no_silent_casting_between_input_dtypes(dev, q):
    a = dev.create_buffer((2,), "float")
    b = dev.create_buffer((2,), "double")
    prog = dev.create_program([mnrt.Kernel("add", ["a", "b"], ["a"])])
    with pytest.raises(mnrt.DTypeError, match="mix float and double.*cast"):
        q.enqueue_program(prog, {"a": a, "b": b})


def test_kernel_construction_errors():
    with pytest.raises(mnrt.UnknownKernelError, match="'gemmm'.*known kernels are.*gemm"):
        mnrt.Kernel("gemmm", ["a", "b"], ["y"])
    for op in (["gemm"], {}, None, 5):
        with pytest.raises(mnrt.UnknownKernelError, match="known kernels are"):
            mnrt.Kernel(op, ["a", "b"], ["y"])
    with pytest.raises(mnrt.KernelAttributeError, match="no attribute 'transA'.*trans_a"):
        mnrt.Kernel("gemm", ["a", "b"], ["y"], {"transA": True})
    with pytest.raises(mnrt.KernelAttributeError, match="'alpha' must be float"):
        mnrt.Kernel("gemm", ["a", "b"], ["y"], {"alpha": "2"})
    with pytest.raises(mnrt.KernelAttributeError, match="takes inputs"):
        mnrt.Kernel("relu", ["a", "b"], ["y"])
    with pytest.raises(mnrt.InvalidArgumentError, match="list of slot names"):
        mnrt.Kernel("relu", "a", ["y"])


def test_equal_kernels_hash_alike():
    # Defaults are filled in, so spelling one out makes the same kernel.
    a = mnrt.Kernel("gemm", ["a", "b"], ["y"], {"alpha": 1.0, "trans_b": False})
    b = mnrt.Kernel("gemm", ["a", "b"], ["y"])
    c = mnrt.Kernel("gemm", ["a", "b"], ["y"], {"alpha": 2.0})
    assert a == b and hash(a) == hash(b)
    assert len({a, b, c}) == 2


def test_create_program_rejects_non_kernels(dev):
    with pytest.raises(mnrt.InvalidArgumentError, match="non-empty list"):
        dev.create_program([])
    with pytest.raises(mnrt.InvalidArgumentError, match="item 0 is dict"):
        dev.create_program([{"op": "relu"}])


def test_program_of_another_device_is_rejected():
    with mnrt.open_device(0) as d0, mnrt.open_device(1) as d1:
        p1 = d1.create_program([mnrt.Kernel("relu", ["a"], ["b"])])
        with pytest.raises(mnrt.InvalidArgumentError, match="created on device 1"):
            d0.command_queue().enqueue_program(p1, {})


def test_device_error_is_raised_by_finish_with_the_command(dev, q):
    bufs, prog = gather_program(dev)
    q.enqueue_write_buffer(bufs["data"], np.arange(5, dtype=np.float32))
    q.enqueue_write_buffer(bufs["idx"], np.array([1, 17], np.int32))
    q.enqueue_program(prog, bufs)  # the bad index is data: only the device can notice
    skipped = q.enqueue_read_buffer(bufs["out"], blocking=False)
    with pytest.raises(
        mnrt.DeviceExecutionError, match=r"command #2 \(program 'lookup'\).*gather.*17"
    ):
        q.finish()
    assert [c.status for c in list(q.history)[-2:]] == ["failed", "skipped"]
    del skipped
    q.finish()  # the error was reported once; the queue works again
    q.enqueue_write_buffer(bufs["idx"], np.array([4, 0], np.int32))
    q.enqueue_program(prog, bufs)
    np.testing.assert_array_equal(q.enqueue_read_buffer(bufs["out"]), [4, 0])


def test_device_error_is_raised_by_blocking_call(dev, q):
    bufs, prog = gather_program(dev)
    q.enqueue_write_buffer(bufs["idx"], np.array([9, 0], np.int32))
    q.enqueue_program(prog, bufs)
    with pytest.raises(mnrt.DeviceExecutionError):
        q.enqueue_read_buffer(bufs["out"], blocking=True)


def test_close_reports_an_unseen_device_error():
    dev = mnrt.open_device(0)
    q = dev.command_queue()
    bufs, prog = gather_program(dev)
    q.enqueue_write_buffer(bufs["idx"], np.array([9, 0], np.int32))
    q.enqueue_program(prog, bufs)
    with pytest.raises(mnrt.DeviceExecutionError):
        dev.close()
    assert not dev.is_open


def test_enqueue_returns_before_the_device_runs(dev, q):
    gate = threading.Event()
    started = threading.Event()

    class Blocker(Command):
        def run(self, backend):
            started.set()
            gate.wait(5)
            return Modelled(0.0, 0.0)

    b = dev.create_buffer((2,), "float")
    q._submit(Blocker(), blocking=False)
    started.wait(5)
    q.enqueue_write_buffer(b, np.ones(2, np.float32))  # returns while the worker is blocked
    assert q.stats()["commands"] == 0
    gate.set()
    q.finish()
    assert q.stats()["commands"] == 2


def _idle_worker(q, monkeypatch):
    """Start q's worker as a thread that never runs a command: what is run, a waiting
    host thread runs."""
    monkeypatch.setattr(q, "_work", lambda: None)


def test_a_waiting_thread_runs_the_queued_commands_itself(dev, q, monkeypatch):
    _idle_worker(q, monkeypatch)
    x = dev.create_buffer((3,), "float")
    y = dev.create_buffer((3,), "float")
    prog = dev.create_program([mnrt.Kernel("relu", ["x"], ["y"])])
    q.enqueue_write_buffer(x, np.array([-1, 0, 2], np.float32))
    q.enqueue_program(prog, {"x": x, "y": y})
    assert q.stats()["commands"] == 0  # nothing ran: the worker is idle
    np.testing.assert_array_equal(q.enqueue_read_buffer(y), [0, 0, 2])
    late = q.enqueue_read_buffer(x, blocking=False)
    q.finish()
    np.testing.assert_array_equal(late, [-1, 0, 2])
    assert [c.status for c in q.history] == ["done"] * 4


def test_commands_run_once_and_in_order_whichever_thread_runs_them(dev, q):
    ran: list[int] = []

    class Note(Command):
        def __init__(self, i):
            super().__init__()
            self.i = i

        def run(self, backend):
            ran.append(self.i)
            return Modelled(0.0, 0.0)

    for i in range(2000):
        q._submit(Note(i), blocking=i % 97 == 0)  # the host joins in now and then
    q.finish()
    assert ran == list(range(2000))


def test_a_waiting_thread_runs_only_what_was_queued_before_it_waited(dev, q, monkeypatch):
    _idle_worker(q, monkeypatch)
    ran: list[str] = []

    class Note(Command):
        def __init__(self, name, then=None):
            super().__init__()
            self.name, self.then = name, then

        def run(self, backend):
            ran.append(self.name)
            if self.then is not None:  # another thread's enqueue, while this one waits
                q._submit(Note(self.then), blocking=False)
            return Modelled(0.0, 0.0)

    q._submit(Note("first", then="later"), blocking=False)
    q.finish()
    assert ran == ["first"]  # "later" was queued after finish() began: not its to run
    q.finish()
    assert ran == ["first", "later"]


def test_an_interrupt_while_the_host_runs_a_command_fails_that_command(dev, q, monkeypatch):
    _idle_worker(q, monkeypatch)

    class Interrupted(Command):
        def run(self, backend):
            raise KeyboardInterrupt

    q._submit(Interrupted(), blocking=False)
    with pytest.raises(KeyboardInterrupt):
        q.finish()
    with pytest.raises(mnrt.DeviceExecutionError, match="KeyboardInterrupt"):
        q.finish()  # reported like any device error, once
    q.finish()
    assert [c.status for c in q.history] == ["failed"]


def test_waiting_leaves_the_threads_own_scratch_in_place(dev, q, monkeypatch):
    from mnrt.device import emulator

    _idle_worker(q, monkeypatch)
    mine = emulator.Scratch()
    before = emulator.use_scratch(mine)
    try:
        b = dev.create_buffer((4,), mnrt.half)
        y = dev.create_buffer((4,), mnrt.half)
        q.enqueue_write_buffer(b, np.ones(4, np.float32))
        relu = dev.create_program([mnrt.Kernel("relu", ["x"], ["y"])])
        q.enqueue_program(relu, {"x": b, "y": y}, blocking=True)
        q.finish()
        assert emulator.use_scratch(mine) is mine  # the queue's was used, then put back
        assert not mine.arrays
    finally:
        emulator.use_scratch(before)


def test_a_worker_that_cannot_start_is_a_device_error_and_queues_nothing(dev, monkeypatch):
    from mnrt.host import workers

    q = dev.command_queue(3)
    b = dev.create_buffer((2,), "float")
    start = workers.run

    def out_of_threads(loop, channel):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(workers, "run", out_of_threads)
    mnrt.begin_capture()
    try:
        with pytest.raises(mnrt.DeviceError, match="cannot start its worker thread"):
            q.enqueue_write_buffer(b, np.ones(2, np.float32))
        monkeypatch.setattr(workers, "run", start)
        q.enqueue_write_buffer(b, np.full(2, 2, np.float32))  # starts it this time
        np.testing.assert_array_equal(q.enqueue_read_buffer(b), [2, 2])
    finally:
        binary = mnrt.end_capture()
    writes = [c for c in binary.commands if c.cmdType == U.WriteBuffer]
    assert len(writes) == 1  # the refused write was not logged


def test_threads_enqueue_on_their_own_queues(dev):
    n_threads, iters = 4, 200
    bufs = [dev.create_buffer((16,), "int32", name=f"c{i}") for i in range(n_threads)]
    one = dev.create_buffer((1,), "int32", name="one")
    dev.command_queue(0).enqueue_write_buffer(one, np.ones(1, np.int32), blocking=True)
    prog = dev.create_program([mnrt.Kernel("add", ["c", "one"], ["c"])])
    errors = []

    def worker(i):
        try:
            q = dev.command_queue(i)
            for _ in range(iters):
                q.enqueue_program(prog, {"c": bufs[i], "one": one})
            q.finish()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(n_threads):
        np.testing.assert_array_equal(dev.command_queue(i).enqueue_read_buffer(bufs[i]), iters)


def test_modelled_time_per_command_and_per_queue(dev, q):
    bufs, prog = _mlp(dev)
    q.enqueue_write_buffer(bufs["x"], np.zeros((4, 8), np.float32))
    q.enqueue_program(prog, bufs)
    q.finish()
    write, run = list(q.history)
    assert write.kind == "write_buffer" and run.kind == "program"
    rec = run.record()
    assert rec["device_time_s"] > 2 * dev.spec.kernel_launch_s - 1e-12
    assert rec["energy_j"] > 0 and rec["flops"] == 2 * 4 * 3 * 8 + 4 * 3  # gemm + relu
    total = q.stats()
    assert total["device_time_s"] == pytest.approx(write.modelled.time_s + run.modelled.time_s)
    assert total["commands"] == 2


def test_queue_index_is_checked(dev):
    with pytest.raises(mnrt.InvalidArgumentError, match="0..7"):
        dev.command_queue(8)
    assert dev.command_queue(1) is dev.command_queue(1)


def test_kernels_listing():
    listing = {k["name"]: k for k in mnrt.kernels()}
    assert {"gemm", "relu", "add", "conv2d", "softmax", "gather", "cast"} <= set(listing)
    g = listing["gemm"]
    assert g["inputs"] == ["a", "b", "c?"] and g["outputs"] == ["y"]
    assert g["attrs"]["trans_a"] == {
        "kind": "bool",
        "default": False,
        "required": False,
        "doc": "use a's last two dims transposed",
    }
    assert all(k["doc"] for k in listing.values())


def test_half_inputs_changed_between_runs_are_read_again(dev, q):
    # Widened half inputs are reused while their bits are unchanged; any change (a host
    # write, or a kernel writing the buffer in place) must be seen by the next run.
    a = dev.create_buffer((8, 8), "half", name="a")
    eye = dev.create_buffer((8, 8), "half", name="eye")
    y = dev.create_buffer((8, 8), "float", name="y")
    mm = dev.create_program([mnrt.Kernel("gemm", ["a", "eye"], ["y"])])
    double = dev.create_program([mnrt.Kernel("add", ["a", "a"], ["a"])])
    q.enqueue_write_buffer(eye, np.eye(8, dtype=np.float32))
    first = np.arange(64, dtype=np.float32).reshape(8, 8)
    q.enqueue_write_buffer(a, first)
    q.enqueue_program(mm, {"a": a, "eye": eye, "y": y})
    np.testing.assert_array_equal(q.enqueue_read_buffer(y), first)
    q.enqueue_write_buffer(a, first + 1)
    q.enqueue_program(mm, {"a": a, "eye": eye, "y": y})
    np.testing.assert_array_equal(q.enqueue_read_buffer(y), first + 1)
    q.enqueue_program(double, {"a": a})
    q.enqueue_program(mm, {"a": a, "eye": eye, "y": y})
    np.testing.assert_array_equal(q.enqueue_read_buffer(y), 2 * (first + 1))


HANG_S = 10  # a hang guard, not a timing


def _in_thread(fn) -> list:
    """Run fn() on a thread; return [result or exception]. Fails the test if it hangs."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), "the call hung"
    return out


def test_command_queue_history_and_numpy_indices(dev):
    with pytest.raises(mnrt.InvalidArgumentError, match="history"):
        dev.command_queue(1, history="many")
    with pytest.raises(mnrt.InvalidArgumentError, match="history"):
        dev.command_queue(2, history=-1)
    assert dev.command_queue(np.int64(3)).index == 3
    with mnrt.open_device(np.int64(5)) as other:
        assert other.index == 5


def test_kernel_and_program_arguments(dev):
    with pytest.raises(mnrt.InvalidArgumentError, match="inputs must be a list"):
        mnrt.Kernel("relu", 3, ["y"])
    with pytest.raises(mnrt.KernelAttributeError, match="attrs must be a dict"):
        mnrt.Kernel("relu", ["x"], ["y"], attrs=[("onchip", ())])
    with pytest.raises(mnrt.InvalidArgumentError, match="non-empty list"):
        dev.create_program(3)
    with pytest.raises(mnrt.InvalidArgumentError, match="program name"):
        dev.create_program([mnrt.Kernel("relu", ["x"], ["y"])], name=5)
    # A generator is taken whole, not consumed by the checks into an empty program.
    prog = dev.create_program(mnrt.Kernel("relu", ["x"], [s]) for s in ["y"])
    assert len(prog.kernels) == 1 and prog.slots == ("x", "y")


def test_a_call_racing_close_is_refused_not_left_waiting(dev, q):
    buf = dev.create_buffer((4,), "float")
    q.enqueue_write_buffer(buf, np.ones(4, np.float32), blocking=True)
    # What close() does first, as another thread's blocking call may see it: the queue has
    # stopped but the device is not marked closed yet.
    q._stop()
    (err,) = _in_thread(lambda: q.enqueue_read_buffer(buf))
    assert isinstance(err, mnrt.DeviceClosedError)
    (err,) = _in_thread(lambda: q.enqueue_write_buffer(buf, np.ones(4, np.float32)))
    assert isinstance(err, mnrt.DeviceClosedError)
    assert not q._pending  # nothing was queued on the stopped queue
    assert _in_thread(dev.close) == [None]


def test_close_from_another_thread_never_strands_a_blocking_caller():
    for _ in range(20):
        dev = mnrt.open_device("auto")
        q = dev.command_queue(0)
        buf = dev.create_buffer((16,), "float")
        started, ended = threading.Event(), []

        def spin(q=q, buf=buf, started=started, ended=ended) -> None:
            started.set()
            try:
                while True:
                    q.enqueue_read_buffer(buf)
            except mnrt.MnrtError as e:
                ended.append(e)

        t = threading.Thread(target=spin, daemon=True)
        t.start()
        started.wait(HANG_S)
        dev.close()
        t.join(HANG_S)
        assert not t.is_alive(), "a blocking read was left waiting after close()"
        assert isinstance(ended[0], mnrt.DeviceClosedError)


class _Note(Command):
    """A command that notes its name in `ran` when it runs."""

    def __init__(self, ran: list[str], name: str) -> None:
        super().__init__()
        self.ran, self.name = ran, name

    def run(self, backend):
        self.ran.append(self.name)
        return Modelled(0.0, 0.0)


class _InterruptedAfterTaking(deque):
    """Pending commands whose next taking off is followed by Ctrl-C: CPython raises a
    KeyboardInterrupt that arrived meanwhile as a call (popleft) returns."""

    def popleft(self):
        super().popleft()
        self.popleft = super().popleft  # once
        raise KeyboardInterrupt


def test_an_interrupt_as_the_host_takes_a_command_neither_loses_nor_repeats_it(dev, q, monkeypatch):
    monkeypatch.setattr(q, "_work", lambda: None)  # the host thread runs every command
    ran: list[str] = []
    for name in ("a", "b", "c"):
        q._submit(_Note(ran, name), blocking=False)
    q._pending = _InterruptedAfterTaking(q._pending)
    with contextlib.suppress(KeyboardInterrupt):
        q.finish()
    with contextlib.suppress(mnrt.DeviceExecutionError):
        q.finish()  # one reported as failed must not have run
    done = [c.name for c in q.history if c.status == "done"]
    assert ran == done
    assert [c.name for c in q.history] == ["a", "b", "c"]  # each ran or failed, once


class _InterruptedAfterPutting(deque):
    """Pending commands whose next putting on is followed by Ctrl-C, raised as the append
    returns."""

    def append(self, cmd):
        super().append(cmd)
        self.append = super().append  # once
        raise KeyboardInterrupt


def test_a_command_put_on_as_ctrl_c_lands_is_waited_for(dev, q, monkeypatch):
    monkeypatch.setattr(q, "_work", lambda: None)  # the host thread runs every command
    x = dev.create_buffer((4,), "float")
    data = np.arange(4, dtype=np.float32) + 0.5
    q._pending = _InterruptedAfterPutting(q._pending)
    with contextlib.suppress(KeyboardInterrupt):
        q.enqueue_write_buffer(x, data)  # queued, though the call was interrupted
    out = q.enqueue_read_buffer(x)  # waits for the write, and for itself
    assert [c.kind for c in q.history] == ["write_buffer", "read_buffer"]
    np.testing.assert_array_equal(out, data)


def _root(a: np.ndarray) -> np.ndarray:
    """The array owning a view's memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


@pytest.mark.parametrize("captured", [False, True])  # a capture's fingerprints note views
def test_the_history_keeps_no_data_of_past_transfers_nor_freed_memory(dev, q, captured):
    # Before: the history's last 4096 commands kept each write's data, each read's array
    # and each run's bound memory, so a compile's weights stayed in host memory after
    # their buffers were freed (VGG-19 compiled five times in one context: 1.25 -> 5.9 GB).
    bufs, prog = _mlp(dev)
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 3), np.float32)
    if captured:
        mnrt.begin_capture(fingerprints=True)
    q.enqueue_write_buffer(bufs["x"], x)
    q.enqueue_write_buffer(bufs["w"], w)
    q.enqueue_program(prog, bufs)
    out = q.enqueue_read_buffer(bufs["y"])
    q.finish()
    if captured:
        assert mnrt.end_capture().fingerprints
    assert [c.kind for c in q.history] == ["write_buffer", "write_buffer", "program", "read_buffer"]
    held = {id(x), id(w), id(out)}
    for cmd in q.history:
        assert not held & {id(v) for v in vars_of(cmd)}
    memory = [weakref.ref(_root(b.peek())) for b in bufs.values()]
    for b in bufs.values():
        b.deallocate()
    gc.collect()
    assert [m() for m in memory] == [None] * 4
    assert q.history[2].label.startswith("program") and q.history[2].plan.steps  # a record
    np.testing.assert_array_equal(out, np.maximum(x @ w, 0))


def vars_of(cmd: Command) -> list:
    """The values a command's attributes hold."""
    return [getattr(cmd, name, None) for name in dir(cmd) if not name.startswith("__")]


def test_slot_views_are_parts_of_one_buffer(dev, q):
    prog, bufs = concat_in_place(dev)
    assert prog.slots == ("a", "whole", "b", "y")  # the views' buffer where first named
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    b = np.arange(4, dtype=np.float32).reshape(2, 2) - 2
    q.enqueue_write_buffer(bufs["a"], a)
    q.enqueue_write_buffer(bufs["b"], b)
    q.enqueue_program(prog, bufs)
    parts = np.concatenate([-a.reshape(-1), np.maximum(b, 0).reshape(-1)])
    np.testing.assert_array_equal(q.enqueue_read_buffer(bufs["whole"]).reshape(-1), parts)
    np.testing.assert_array_equal(q.enqueue_read_buffer(bufs["y"]), -parts)
    # the parts cover the buffer: the program writes it whole before reading it
    assert [b.name for b in prog.plan(bufs).read_first] == ["a", "b"]


def test_bad_slot_views_are_refused(dev, q):
    prog, bufs = concat_in_place(dev)
    kernels = list(prog.kernels)
    with pytest.raises(mnrt.BindingError, match="'nowhere' is no kernel's operand"):
        dev.create_program(kernels, views={"nowhere": mnrt.SlotView("whole", 0, (1,))})
    with pytest.raises(mnrt.BindingError, match="form a cycle"):
        dev.create_program(
            kernels,
            views={"left": mnrt.SlotView("right", 0, (2, 2)), "right": ("left", 0, (2, 2))},
        )
    with pytest.raises(mnrt.InvalidArgumentError, match="non-negative ints"):
        dev.create_program(kernels, views={"left": mnrt.SlotView("whole", -1, (2, 3))})
    with pytest.raises(mnrt.InvalidArgumentError, match=r"mnrt.SlotView\(of, offset, shape\)"):
        dev.create_program(kernels, views={"left": "whole"})
    with pytest.raises(mnrt.ShapeError, match="a view ends past the end of view 'flat'"):
        dev.create_program(
            kernels,
            views={"left": mnrt.SlotView("flat", 8, (2, 3)), "flat": ("whole", 0, (10,))},
        )
    small = dev.create_buffer((3, 3), "float", name="small")
    with pytest.raises(mnrt.ShapeError, match=r"slot 'right' is elements 6\.\.\.10 of slot"):
        q.enqueue_program(prog, {**bufs, "whole": small})
    with pytest.raises(mnrt.BindingError, match="unknown slot.*'left'"):
        q.enqueue_program(prog, {**bufs, "left": bufs["a"]})
