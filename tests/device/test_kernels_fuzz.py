"""Every kernel, fed arbitrary operands and attributes as a hostile binary could: the shape
rules either accept them or raise an MnrtError, never another exception (replay's validator
runs them on whatever a binary holds). What they accept, and is small enough to run, runs:
a failure there must be the kernel's own MnrtError (an index out of range, say), not a numpy
error that infer should have refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.device.dtypes import DTYPES
from mnrt.device.emulator import EmulatedDevice
from mnrt.device.kernels import TensorSpec, lookup
from mnrt.device.kernels.registry import REQUIRED, all_kernels
from mnrt.errors import DeviceExecutionError, MnrtError

KERNELS = all_kernels()
RUN_LIMIT = 4096  # elements per operand below which an accepted case is also run

small_ints = st.integers(-3, 6)
any_ints = st.one_of(small_ints, st.integers(-(2**63), 2**63 - 1))
dims = st.one_of(st.integers(0, 5), st.sampled_from([2**31, 2**40]))
any_floats = st.one_of(st.floats(-4, 4), st.floats(allow_nan=True, allow_infinity=True))


def _value(kind: str, choices) -> st.SearchStrategy:
    if choices is not None:
        return st.one_of(st.sampled_from(choices), st.text(max_size=4))
    return {
        "int": any_ints,
        "float": any_floats,
        "bool": st.booleans(),
        "str": st.text(max_size=8),
        "ints": st.lists(any_ints, max_size=6),
        "floats": st.lists(any_floats, max_size=4),
    }[kind]


@st.composite
def _case(draw, kdef):
    variadic = math.isinf(kdef._max_inputs)
    count = draw(
        st.integers(kdef._min_inputs, kdef._min_inputs + 2 if variadic else int(kdef._max_inputs))
    )
    shapes = st.lists(dims, max_size=4).map(tuple)
    specs = [
        TensorSpec(draw(shapes), draw(st.sampled_from(list(DTYPES.values())))) for _ in range(count)
    ]
    attrs = {}
    for name, schema in kdef.attrs.items():
        if schema.default is REQUIRED or draw(st.booleans()):
            attrs[name] = draw(_value(schema.kind, schema.choices))
    return specs, attrs


def _run(dev, kernel, specs, outs) -> None:
    """Run an accepted case on the emulated device with small random operands. Refusals
    (MnrtError) by the host API are clean; so is a device error the kernel raised itself
    (an index out of range), but not one from numpy, which infer should have refused."""
    rng = np.random.default_rng(0)
    q = dev.command_queue(0)
    try:
        bindings = {}
        for slot, spec in zip(kernel.inputs, specs):
            bindings[slot] = buf = dev.create_buffer(spec.shape, spec.dtype)
            data = rng.integers(-3, 4, spec.shape)
            q.enqueue_write_buffer(buf, data.astype(buf.dtype.read_dtype))
        for slot, out in zip(kernel.outputs, outs):
            bindings[slot] = dev.create_buffer(out.shape, out.dtypes[0])
        q.enqueue_program(dev.create_program([kernel]), bindings)
        q.finish()
    except DeviceExecutionError as e:
        assert isinstance(e.__cause__, MnrtError), f"{kernel.op}: {e}"
    except MnrtError:
        pass
    finally:
        dev.reset()


@pytest.mark.parametrize("kdef", KERNELS, ids=[k.name for k in KERNELS])
def test_shape_rules_accept_or_refuse_cleanly(kdef, dev):
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_case(kdef))
    def check(case):
        specs, attrs = case
        slots = [f"i{i}" for i in range(len(specs))]
        try:
            kernel = mnrt.Kernel(
                kdef.name, slots, [f"o{i}" for i in range(len(kdef.outputs))], attrs
            )
            outs = kdef.infer(specs, kernel.attrs)
        except MnrtError:
            return
        small = all(s.size <= RUN_LIMIT for s in specs) and all(
            math.prod(o.shape) <= RUN_LIMIT for o in outs
        )
        if small:
            _run(dev, kernel, specs, outs)

    check()


@pytest.mark.parametrize(
    ("op", "shapes", "attrs"),
    [
        ("concat", [(), ()], {"axis": 0}),  # an IndexError in infer
        ("softmax", [()], {"axis": 0}),  # accepted, then a numpy AxisError on the device
        ("log_softmax", [()], {"axis": -1}),
    ],
)
def test_found_by_fuzzing_scalars_have_no_axis(op, shapes, attrs):
    kernel = mnrt.Kernel(op, [f"i{i}" for i in range(len(shapes))], ["o"], attrs)
    specs = [TensorSpec(s, DTYPES["float"]) for s in shapes]
    with pytest.raises(mnrt.ShapeError, match="a scalar has no axes"):
        kernel.kdef.infer(specs, kernel.attrs)


def test_found_by_fuzzing_empty_buffer_with_huge_dimensions(dev):
    with pytest.raises(mnrt.ShapeError, match="is empty, but its other dimensions"):
        dev.create_buffer((0, 2**31, 2**31), "double")
    assert dev.create_buffer((0, 1024), "double").nbytes == 0


@pytest.mark.parametrize(
    ("op", "attrs", "w_shape", "message"),
    [
        # A 2**31-tap window: its taps used to be listed in one 16 GiB array.
        (
            "max_pool2d",
            {"kernel": [2**31, 1], "stride": [2**31, 1], "padding": [2**31 - 2, 0, 2**31, 0]},
            None,
            "padded input",
        ),
        # A tiny output from a 16-billion-row padded input the kernel would materialise.
        (
            "conv2d",
            {"padding": [2**33, 0, 2**33, 0], "stride": [2**40, 1]},
            (1, 1, 1, 1),
            "padded input",
        ),
        (
            "avg_pool2d",
            {"kernel": [3, 3], "padding": [2**20, 0, 2**20, 0], "stride": [2**20, 1]},
            None,
            "padded input",
        ),
        # Columns of 2**34 elements from small buffers.
        ("conv2d", {"padding": [64, 64, 64, 64]}, (1, 1, 128, 128), "im2col"),
    ],
    ids=["pool-huge-window", "conv-huge-padding", "avgpool-huge-padding", "conv-huge-im2col"],
)
def test_found_by_fuzzing_temporaries_are_bounded_before_anything_is_allocated(
    op, attrs, w_shape, message
):
    x = TensorSpec((1, 1, 4096, 4096) if message == "im2col" else (1, 1, 4, 4), DTYPES["float"])
    specs = [x] + ([TensorSpec(w_shape, DTYPES["float"])] if w_shape else [])
    kernel = mnrt.Kernel(op, ["x", "w"][: len(specs)], ["y"], attrs)
    with pytest.raises(mnrt.KernelAttributeError, match=message):
        kernel.kdef.infer(specs, kernel.attrs)


def test_padding_that_windows_need_is_still_accepted():
    x = TensorSpec((1, 1, 1, 1), DTYPES["float"])  # same padding of a 7x7 kernel on 1x1
    w = TensorSpec((1, 1, 7, 7), DTYPES["float"])
    out = lookup("conv2d").infer([x, w], mnrt.Kernel("conv2d", ["x", "w"], ["y"],
                                                    {"padding": [3, 3, 3, 3]}).attrs)  # fmt: skip
    assert out[0].shape == (1, 1, 1, 1)


@pytest.mark.parametrize("op", ["trilu", "reverse_sequence"])
def test_found_by_fuzzing_a_kernel_whose_outputs_are_empty_computes_nothing(op):
    # trilu listed the row indices of an empty (1, 2, 2**31, 0) operand: a 16 GiB array,
    # 30 s, for no element (2**40 rows: 8 TiB, a MemoryError).
    kdef = lookup(op)
    x = np.empty((2**40, 0), np.float32)
    ins: list = [(x, DTYPES["float"])]
    if op == "reverse_sequence":
        ins.append((np.empty(0, np.int64), DTYPES["int64"]))
    bound = EmulatedDevice.bind(kdef, kdef.check_attrs({}), ins, [(x.copy(), DTYPES["float"])])
    (y,) = bound.run()
    assert y.shape == (2**40, 0)
