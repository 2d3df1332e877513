"""Small captures that several test modules replay, convert or corrupt."""

from __future__ import annotations

import numpy as np

import mnrt


def json_paths(doc, prefix: tuple = ()):
    """Every path to a value inside a JSON document (a binary's JSON form), itself first:
    where property tests edit one."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from json_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from json_paths(v, (*prefix, i))


def small_capture() -> mnrt.LightBinary:
    """A short valid capture: one program, one write, one read with a golden."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        a = dev.create_buffer((2, 3), "float", name="a")
        y = dev.create_buffer((2, 3), "float", name="y")
        prog = dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])], name="e")
        q.enqueue_write_buffer(a, np.arange(6, dtype=np.float32).reshape(2, 3) / 10)
        q.enqueue_program(prog, {"a": a, "y": y})
        q.enqueue_read_buffer(y)
        return mnrt.end_capture()


def write_and_read(name: str, dtype: str, data: np.ndarray) -> mnrt.LightBinary:
    """A capture of one buffer `name` written with `data` and read back (its golden)."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        buf = dev.create_buffer(data.shape, dtype, name=name)
        q.enqueue_write_buffer(buf, data)
        q.enqueue_read_buffer(buf, blocking=True)
        return mnrt.end_capture()


def light_model_binary(name: str, folder) -> mnrt.LightBinary:
    """One of the onnx wheel's light models (onnx/backend/test/data/light), compiled at
    float and saved with `save_binary` (kernel fingerprints on, as for every compiled
    binary); skipped where onnx is not installed."""
    import pytest

    onnx = pytest.importorskip("onnx")
    from pathlib import Path

    source = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    model = onnx.load(str(source))
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    inputs = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
        if i.name not in inits
    }
    ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
    path = Path(folder) / f"{name}.mnlb"
    ctx.compile(model, inputs, options={"float_dtype": "float"}).save_binary(path)
    return mnrt.LightBinary.load(path)


def preact_block(shape: tuple[int, int, int, int], residual: bool = True):
    """A pre-activation block (DenseNet's and ResNet v2's): BatchNormalization as an
    inference compiles it (a mul and an add of per-channel parameters), Relu, a 3x3 conv,
    then, with `residual`, the add of the block's input and a Relu. O3 fuses the first
    three, and the residual add with its Relu, into chains that take operands. Returns the
    GraphBuilder and a random input."""
    from mnrt.compiler import GraphBuilder

    rng = np.random.default_rng(3)
    c = shape[1]
    b = GraphBuilder("pre")
    x = b.input("x", shape, "float")
    scale = b.param("scale", rng.uniform(0.5, 2, (c, 1, 1)).astype(np.float32))
    shift = b.param("shift", rng.standard_normal((c, 1, 1)).astype(np.float32))
    w = b.param("w", rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2)
    h = b.conv2d(b.relu(b.add(b.mul(x, scale), shift)), w, padding=(1, 1, 1, 1))
    b.output(b.relu(b.add(h, x)) if residual else h, "y")
    return b, {"x": rng.standard_normal(shape).astype(np.float32)}


def weight_sites(binary: mnrt.LightBinary, min_rank: int = 2) -> list[tuple[int, int, int]]:
    """(command, kernel, buffer id) of the first execution of every kernel that reads a
    floating-point weight of at least `min_rank` dimensions (a bias changed by a little
    vanishes in outputs of 1e9, as the light models' constant weights give) that no other
    kernel of any program reads: a buffer the binary writes and no kernel writes.
    `kernel` counts the kernels the command ran, as fingerprints do."""
    from mnrt.format.fb.CommandUnion import CommandUnion as U
    from mnrt.host.program import view_root
    from mnrt.replay.plan import program_sequence, validate

    plan = validate(binary)
    written = {c.cmd.bufferId for c in binary.commands if c.cmdType == U.WriteBuffer}
    reads: dict[int, list[tuple[int, int]]] = {}
    readers: dict[int, set[tuple[int, int]]] = {}  # buffer -> (program, position) reading it
    produced: set[int] = set()
    traces: dict[int, list[list[int]]] = {}  # trace id -> buffers of each program it holds
    capturing: dict[int, int] = {}  # queue id -> the trace it captures
    for index, c in enumerate(binary.commands):
        if c.cmdType == U.EnqueueProgram:
            bound = [[int(b) for b in c.cmd.bufferIds]]
        elif c.cmdType == U.ReplayTrace:
            bound = traces.get(c.cmd.traceId, [])
        else:
            if c.cmdType == U.BeginTraceCapture:
                capturing[c.cmd.queueId] = c.cmd.traceId
                traces[c.cmd.traceId] = []
            elif c.cmdType == U.EndTraceCapture:
                capturing.pop(c.cmd.queueId, None)
            continue
        if c.cmdType == U.EnqueueProgram and c.cmd.queueId in capturing:
            traces[capturing[c.cmd.queueId]].append(bound[0])
            continue
        kernel = 0
        for program, ids in zip(program_sequence(plan, index), bound):
            bound = dict(zip(program.slots, ids))
            slots = {s: bound[view_root(program.views, s)[0]]
                     for k in program.kernels for s in (*k.inputs, *k.outputs)}  # fmt: skip
            for position, k in enumerate(program.kernels):
                for s in k.inputs:
                    reads.setdefault(slots[s], []).append((index, kernel))
                    readers.setdefault(slots[s], set()).add((id(program), position))
                produced.update(slots[s] for s in k.outputs)
                kernel += 1
    return [
        (*sites[0], gid)
        for gid, sites in reads.items()
        if gid in written
        and gid not in produced
        and len(readers[gid]) == 1
        and plan.buffers[gid].dtype.is_float
        and len(plan.buffers[gid].shape) >= min_rank
    ]


def perturbed(binary: mnrt.LightBinary, buffer_id: int, scale: float = 1.25) -> mnrt.LightBinary:
    """`binary` with the data it writes to buffer `buffer_id` scaled (and offset, so that
    zeros change too), its fingerprints and goldens as they were."""
    import copy

    from mnrt.format.edit import Editor
    from mnrt.format.fb.Command import CommandT
    from mnrt.format.fb.CommandUnion import CommandUnion as U
    from mnrt.replay.plan import validate

    dtype = validate(binary, blobs=False).buffers[buffer_id].dtype
    editor = Editor(binary)
    commands = []
    for c in binary.commands:
        if c.cmdType == U.WriteBuffer and c.cmd.bufferId == buffer_id:
            bits = np.frombuffer(binary.blobs.read(c.cmd.data), dtype.storage)
            values = dtype.from_storage(bits).astype(np.float64) * scale + 0.125
            body = copy.copy(c.cmd)
            stored = (
                values.astype(dtype.storage)
                if dtype.codec is None
                else dtype.to_storage(values.astype(np.float32))
            )
            body.data = editor.add_blob(stored)
            c = CommandT(c.cmdType, body)
        commands.append(c)
    return editor.build(commands, fingerprints=binary.fingerprints)


def chain_capture(kernels: int = 200, gather_at: int | None = None) -> mnrt.LightBinary:
    """A program of `kernels` kernels on one running value (4x4): h = h * w_i, h = h + w_i,
    in turn, each weight its own buffer; then a read of the value (its golden). Captured
    with fingerprints. With `gather_at`, kernel `gather_at` gathers the value's rows by an
    index buffer `idx` (in range: 3, 2, 1, 0) into a second buffer, where the chain goes on."""
    rng = np.random.default_rng(1)
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(fingerprints=True)
        bindings = {"h": dev.create_buffer((4, 4), "float", name="h")}
        q.enqueue_write_buffer(bindings["h"], rng.standard_normal((4, 4)).astype(np.float32))
        program, value = [], "h"
        for i in range(kernels):
            if i == gather_at:
                bindings["idx"] = dev.create_buffer((4,), "int32", name="idx")
                bindings["g"] = dev.create_buffer((4, 4), "float", name="g")
                q.enqueue_write_buffer(bindings["idx"], np.array([3, 2, 1, 0], np.int32))
                program.append(mnrt.Kernel("gather", [value, "idx"], ["g"]))
                value = "g"
                continue
            w = bindings[f"w{i}"] = dev.create_buffer((4, 4), "float", name=f"w{i}")
            q.enqueue_write_buffer(w, 1 + rng.standard_normal((4, 4)).astype(np.float32) / 8)
            program.append(mnrt.Kernel("mul" if i % 2 == 0 else "add", [value, f"w{i}"], [value]))
        q.enqueue_program(dev.create_program(program, name="chain"), bindings)
        q.enqueue_read_buffer(bindings[value])
        return mnrt.end_capture()


def with_written(binary: mnrt.LightBinary, buffer_name: str, data: np.ndarray) -> mnrt.LightBinary:
    """`binary` with what it writes to the buffer named `buffer_name` replaced by `data`."""
    import copy

    from mnrt.format.edit import Editor
    from mnrt.format.fb.Command import CommandT
    from mnrt.format.fb.CommandUnion import CommandUnion as U

    names = {
        c.cmd.bufferId: c.cmd.desc.name.decode()
        for c in binary.commands
        if c.cmdType == U.CreateBuffer
    }
    editor = Editor(binary)
    commands = []
    for c in binary.commands:
        if c.cmdType == U.WriteBuffer and names[c.cmd.bufferId] == buffer_name:
            body = copy.copy(c.cmd)
            body.data = editor.add_blob(data)
            c = CommandT(c.cmdType, body)
        commands.append(c)
    return editor.build(commands, fingerprints=binary.fingerprints)


def three_device_capture(fingerprints: bool = False) -> mnrt.LightBinary:
    """Copies both ways between devices and events between them: device 0 computes and
    pushes its result to device 1 (copy on the sender's queue, then an event); device 2
    records an event that device 1's second queue waits on before pulling device 2's
    buffer (copy on the receiver's queue); device 1 computes on both."""
    devices = [mnrt.open_device(i) for i in range(3)]
    try:
        d0, d1, d2 = devices
        q0, q1, q1b, q2 = (
            d0.command_queue(0),
            d1.command_queue(0),
            d1.command_queue(1),
            d2.command_queue(0),
        )
        mnrt.begin_capture(fingerprints=fingerprints)
        x = d0.create_buffer((64, 64), "float", name="x")
        h = d0.create_buffer((64, 64), "float", name="h")
        h1 = d1.create_buffer((64, 64), "float", name="h_on_1")
        z = d2.create_buffer((64, 64), "float", name="z")
        z1 = d1.create_buffer((64, 64), "float", name="z_on_1")
        y = d1.create_buffer((64, 64), "float", name="y")
        q0.enqueue_write_buffer(x, np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64))
        q0.enqueue_program(d0.create_program([mnrt.Kernel("exp", ["a"], ["b"])]), {"a": x, "b": h})
        q0.enqueue_copy_buffer(h, h1)
        pushed = q0.record_event()
        q2.enqueue_write_buffer(z, np.ones((64, 64), np.float32))
        written = q2.record_event()
        q1b.wait_event(written)
        q1b.enqueue_copy_buffer(z, z1)
        pulled = q1b.record_event()
        q1.wait_event(pushed)
        q1.wait_event(pulled)
        add = d1.create_program([mnrt.Kernel("add", ["a", "b"], ["c"])])
        q1.enqueue_program(add, {"a": h1, "b": z1, "c": y})
        q1.enqueue_read_buffer(y)
        return mnrt.end_capture()
    finally:
        for d in devices:
            d.close()


def pipelined_binary(folder) -> mnrt.LightBinary:
    """Four 256x256 GEMMs (each with a relu) on a 256-row input, compiled into a pipeline
    over devices 0 and 1 (two microbatches) and saved: a multi-device binary with
    fingerprints whose GEMMs, on both devices, are large enough that BLAS runs them on
    several threads where the process has them (and rounds them differently on fewer)."""
    from pathlib import Path

    from mnrt.compiler import GraphBuilder

    rng = np.random.default_rng(0)
    b = GraphBuilder("deep")
    h = b.input("x", (256, 256))
    for i in range(4):
        w = b.param(f"w{i}", (rng.standard_normal((256, 256)) / 16).astype(np.float32))
        h = b.relu(b.gemm(h, w, b.param(f"b{i}", np.zeros(256, np.float32))))
    b.output(h, "y")
    path = Path(folder) / "pipelined.mnlb"
    with mnrt.Context() as ctx:
        mpmd = {"devices": [0, 1], "microbatches": 2}
        inputs = {"x": rng.standard_normal((256, 256)).astype(np.float32)}
        compiled = ctx.compile(b, inputs, options={"mpmd": mpmd})
        compiled.save_binary(path)
        compiled.close()
    return mnrt.LightBinary.load(path)


RELAY_N = 64  # the width of relay's values


def relay_session(ordered: bool = True) -> None:
    """Device 0 writes s and copies it to r on device 1, whose queue multiplies r by v,
    three times. Unless `ordered`, device 0's next copy does not wait for device 1's
    program to have read r: a race on r."""
    rng = np.random.default_rng(0)
    d0, d1 = mnrt.open_device(0), mnrt.open_device(1)
    try:
        q0, q1 = d0.command_queue(0), d1.command_queue(0)
        s = d0.create_buffer((4, RELAY_N), "float", name="s")
        r = d1.create_buffer((4, RELAY_N), "float", name="r")
        v = d1.create_buffer((RELAY_N, RELAY_N), "float", name="v")
        o = d1.create_buffer((4, RELAY_N), "float", name="o")
        step = d1.create_program([mnrt.Kernel("gemm", ["r", "v"], ["o"])], name="step")
        q1.enqueue_write_buffer(v, rng.standard_normal((RELAY_N, RELAY_N)).astype(np.float32))
        for _ in range(3):
            q0.enqueue_write_buffer(s, rng.standard_normal((4, RELAY_N)).astype(np.float32))
            q0.enqueue_copy_buffer(s, r)
            q1.wait_event(q0.record_event())
            q1.enqueue_program(step, {"r": r, "v": v, "o": o})
            q1.enqueue_read_buffer(o, blocking=False)
            if ordered:
                q0.wait_event(q1.record_event())
        q1.finish()
    finally:
        d0.close()
        d1.close()


def relay(ordered: bool = True) -> mnrt.LightBinary:
    mnrt.begin_capture()
    try:
        relay_session(ordered)
    finally:
        binary = mnrt.end_capture()
    return binary


def three_buffers(order: str) -> mnrt.LightBinary:
    """Buffers a, b and c created and written in `order`, then a program reading them."""
    data = {n: np.full((4,), k + 1, np.float32) for k, n in enumerate("abc")}
    with mnrt.open_device("auto") as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        bufs = {}
        for n in order:
            bufs[n] = dev.create_buffer((4,), "float", name=n)
            q.enqueue_write_buffer(bufs[n], data[n])
        bufs["y"] = dev.create_buffer((4,), "float", name="y")
        program = [mnrt.Kernel("add", ["a", "b"], ["y"]), mnrt.Kernel("mul", ["y", "c"], ["y"])]
        q.enqueue_program(dev.create_program(program, name="p"), bufs)
        q.enqueue_read_buffer(bufs["y"])
        return mnrt.end_capture()


def concat_in_place(dev):
    """A program whose two kernels write the halves of one buffer (the parts of a
    concatenation, as compiled programs lay them out) and a third reads it whole, reshaped."""
    prog = dev.create_program(
        [
            mnrt.Kernel("neg", ["a"], ["left"]),
            mnrt.Kernel("relu", ["b"], ["right"]),
            mnrt.Kernel("neg", ["flat"], ["y"]),
        ],
        views={
            "left": mnrt.SlotView("whole", 0, (2, 3)),
            "right": mnrt.SlotView("whole", 6, (2, 2)),
            "flat": mnrt.SlotView("whole", 0, (10,)),
        },
    )
    bufs = {
        "a": dev.create_buffer((2, 3), "float", name="a"),
        "b": dev.create_buffer((2, 2), "float", name="b"),
        "whole": dev.create_buffer((2, 5), "float", name="whole"),
        "y": dev.create_buffer((10,), "float", name="y"),
    }
    return prog, bufs


def views_capture() -> mnrt.LightBinary:
    """A capture of concat_in_place's program: its inputs written, its output read."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        prog, bufs = concat_in_place(dev)
        q.enqueue_write_buffer(bufs["a"], np.arange(6, dtype=np.float32).reshape(2, 3) - 3)
        q.enqueue_write_buffer(bufs["b"], np.arange(4, dtype=np.float32).reshape(2, 2) - 2)
        q.enqueue_program(prog, bufs)
        q.enqueue_read_buffer(bufs["y"])
        return mnrt.end_capture()
