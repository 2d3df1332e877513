"""The `chain` kernel: a run of one-input one-output kernels in one launch computes bitwise
what the kernels compute one by one, is priced below them, and refuses hostile steps."""

from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_harness import operand

from mnrt.device import dtypes as dt
from mnrt.device import tolerance
from mnrt.device.emulator import EmulatedDevice
from mnrt.device.kernels import TensorSpec, all_kernels, chain, lookup
from mnrt.device.mapping import model_kernel_call
from mnrt.device.spec import MNCORE2
from mnrt.errors import DTypeError, KernelAttributeError, MnrtError, ShapeError

FLOATS = ("float", "half", "float16", "double")


def _steps(*steps: tuple) -> str:
    return chain.dumps([{"op": op, "attrs": dict(a)} for op, *rest in steps for a in rest or [{}]])


def _attrs(steps: str, x_dtype: str) -> dict:
    return lookup("chain").check_attrs({"steps": steps, "x_dtype": x_dtype})


def _fresh(shape, d: dt.DType) -> np.ndarray:
    """An output buffer of garbage, as a device buffer starts."""
    nbytes = math.prod(shape) * d.itemsize
    return np.full(nbytes, 0xA5, np.uint8).view(d.storage).reshape(shape)


def _step(step: tuple) -> tuple[str, dict, list[int], int]:
    """(op, attrs[, takes[, at]]) with the defaults filled in."""
    op, attrs, *rest = step
    takes = list(rest[0]) if rest else []
    return op, attrs, takes, rest[1] if len(rest) > 1 else 0


def one_by_one(x: tuple[np.ndarray, dt.DType], steps: list[tuple], operands=()) -> tuple:
    """The steps as separate kernels, each result stored in a buffer of its own; a step
    (op, attrs, takes, at) also takes the chain's inputs `takes` (x, then `operands`)."""
    given = [x, *operands]
    for step in steps:
        op, attrs, takes, at = _step(step)
        kdef = lookup(op)
        checked = kdef.check_attrs(attrs)
        others = [given[k] for k in takes]
        ins = [*others[:at], x, *others[at:]]
        (out,) = kdef.infer([TensorSpec(a.shape, d) for a, d in ins], checked)
        y = (_fresh(out.shape, out.dtypes[0]), out.dtypes[0])
        with np.errstate(all="ignore"):
            EmulatedDevice.execute(kdef, checked, ins, [y])
        x = y
    return x


def _dumps(steps: list[tuple]) -> str:
    listed = []
    for step in steps:
        op, attrs, takes, at = _step(step)
        listed.append({"op": op, "attrs": attrs, **({"with": takes} if takes else {}), "at": at})
    return chain.dumps(listed)


def as_chain(x: tuple[np.ndarray, dt.DType], steps: list[tuple], operands=(), **extra) -> list:
    """The chain of `steps` (and `extra` attributes) on x and the operands: every output
    it makes (its tapped result second)."""
    kdef = lookup("chain")
    attrs = kdef.check_attrs(
        {
            "steps": _dumps(steps),
            "x_dtype": x[1].name,
            "operand_dtypes": ",".join(d.name for _, d in operands),
            **extra,
        }
    )
    ins = [x, *operands]
    made = kdef.infer([TensorSpec(a.shape, d) for a, d in ins], attrs)
    outs = [(_fresh(o.shape, o.dtypes[0]), o.dtypes[0]) for o in made]
    with np.errstate(all="ignore"):
        EmulatedDevice.execute(kdef, attrs, ins, outs)
    return outs


def test_the_cnn_tail_is_bitwise_the_kernels_one_by_one():
    rng = np.random.default_rng(0)
    x = operand(rng.standard_normal((2, 16, 8, 8)) * 50, "half")
    steps = [
        ("cast", {"to": "float"}),
        ("max_pool2d", {"kernel": (2, 2)}),
        ("global_avg_pool2d", {}),
        ("reshape", {"shape": (2, 16)}),
        ("cast", {"to": "half"}),
    ]
    want, got = one_by_one(x, steps), as_chain(x, steps)[0]
    assert got[1] is want[1] is dt.HALF and got[0].shape == (2, 16)
    assert got[0].tobytes() == want[0].tobytes()


# Steps valid on a tensor of the given spec: (op, attrs) for each that applies.
def _options(t: TensorSpec) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = [("cast", {"to": d}) for d in FLOATS]
    if t.dtype.is_float:
        out += [(op, {}) for op in ("relu", "exp", "tanh", "sigmoid", "gelu", "neg", "abs")]
        out += [("softmax", {"axis": -1}), ("clip", {"min": -0.5, "max": 2.0})]
        out += [("sum", {"axes": (-1,), "keepdims": True}), ("cumsum", {"axis": 0})]
    if len(t.shape) == 4:
        n, _, h, w = t.shape
        out += [("global_avg_pool2d", {}), ("reshape", {"shape": (n, -1)})]
        if h >= 2 and w >= 2:
            out += [("max_pool2d", {"kernel": (2, 2)}), ("avg_pool2d", {"kernel": (2, 1)})]
    out += [("transpose", {}), ("copy", {})]
    return out


@st.composite
def chains(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=4, max_size=4)))
    x = TensorSpec(shape, dt.dtype(draw(st.sampled_from(FLOATS))))
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        op, attrs = draw(st.sampled_from(_options(x)))
        kdef = lookup(op)
        out = kdef.infer([x], kdef.check_attrs(attrs))[0]
        steps.append((op, attrs))
        x = TensorSpec(tuple(out.shape), out.dtypes[0])
    values = draw(st.sampled_from([1.0, 30.0, 1e4])) * np.random.default_rng(
        draw(st.integers(0, 2**16))
    ).standard_normal(shape)
    return steps, values


@given(chains(), st.sampled_from(FLOATS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_chains_are_bitwise_their_steps_one_by_one(case, x_dtype):
    steps, values = case
    x = operand(values, x_dtype)
    want, got = one_by_one(x, steps), as_chain(x, steps)[0]
    assert got[1] is want[1] and got[0].shape == want[0].shape
    assert got[0].tobytes() == want[0].tobytes()


_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "prelu")
_SAME_SHAPE = ("relu", "exp", "tanh", "sigmoid", "neg", "abs")


@st.composite
def operand_chains(draw):
    """A chain whose steps take operands of its own (a per-channel scale, a skip
    connection, a scalar) besides the result before them, in either position."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n, c, h, w = (draw(st.integers(1, 4)) for _ in range(4))
    x_dtype = dt.dtype(draw(st.sampled_from(FLOATS)))
    x = operand(rng.standard_normal((n, c, h, w)) * 4, x_dtype.name)
    operands = []
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from([(n, c, h, w), (c, 1, 1), (1,), (h, w)]))
        values = rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)
        operands.append(operand(values, draw(st.sampled_from(FLOATS))))
    given = [x, *operands]
    steps, running = [], x_dtype
    for _ in range(draw(st.integers(1, 6))):
        same = [k for k, (_, d) in enumerate(given) if d is running]
        if same and draw(st.booleans()):
            op = draw(st.sampled_from(_BINARY))
            takes, at = [draw(st.sampled_from(same))], draw(st.integers(0, 1))
            at = 0 if op == "prelu" and given[takes[0]][0].ndim == 4 else at
            steps.append((op, {}, takes, at))
        elif draw(st.booleans()):
            running = dt.dtype(draw(st.sampled_from(FLOATS)))
            steps.append(("cast", {"to": running.name}))
        else:
            steps.append((draw(st.sampled_from(_SAME_SHAPE)), {}))
    return x, operands, steps


@given(operand_chains())
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_chains_with_operands_are_bitwise_their_steps_one_by_one(case):
    x, operands, steps = case
    want, got = one_by_one(x, steps, operands), as_chain(x, steps, operands)[0]
    assert got[1] is want[1] and got[0].shape == want[0].shape
    assert got[0].tobytes() == want[0].tobytes()


@given(operand_chains(), st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_chain_writes_out_its_tapped_step_as_that_step_alone_stores_it(case, data):
    x, operands, steps = case
    if len(steps) < 2:
        return
    tap = data.draw(st.integers(0, len(steps) - 2))
    y, tapped = as_chain(x, steps, operands, tap=tap)
    want_y, want_tap = one_by_one(x, steps, operands), one_by_one(x, steps[: tap + 1], operands)
    assert tapped[1] is want_tap[1] and tapped[0].tobytes() == want_tap[0].tobytes()
    assert y[1] is want_y[1] and y[0].tobytes() == want_y[0].tobytes()


def test_a_residual_block_end_writes_its_float_result_and_rounds_it_in_one_launch():
    """cast+add+relu, written out (the next block's skip connection reads it), then a cast to
    half (its convolutions read that): DRAM takes the half input, the skip, the tap and the
    half output once each, and the one launch prices below the two it replaces."""
    x, h = TensorSpec((1, 64, 28, 28), dt.HALF), TensorSpec((1, 64, 28, 28), dt.FLOAT)
    steps = _dumps([("cast", {"to": "float"}), ("add", {}, [1]), ("relu", {}),
                    ("cast", {"to": "half"})])  # fmt: skip
    kdef = lookup("chain")
    base = {"steps": steps, "x_dtype": "half", "operand_dtypes": "float"}
    ins = [x, h]
    tapped = kdef.check_attrs({**base, "tap": 2})
    assert [o.dtypes[0] for o in kdef.infer(ins, tapped)] == [dt.HALF, dt.FLOAT]
    whole = model_kernel_call(MNCORE2, kdef, ins, [x, h], tapped)
    assert whole.dram_bytes == 2 * x.nbytes + 2 * h.nbytes
    # positions: x, the skip, y, the tap
    kept = model_kernel_call(MNCORE2, kdef, ins, [x, h], {**tapped, "onchip": (3,)})
    assert kept.dram_bytes == whole.dram_bytes - h.nbytes
    before = _dumps([("cast", {"to": "float"}), ("add", {}, [1]), ("relu", {})])
    first = kdef.check_attrs({**base, "steps": before})
    apart = (
        model_kernel_call(MNCORE2, kdef, ins, [h], first).time_s
        + model_kernel_call(MNCORE2, lookup("cast"), [h], [x], {"to": "half"}).time_s
    )
    assert whole.time_s < apart


def test_a_tap_must_name_a_step_before_the_last_and_be_given_its_slot():
    kdef = lookup("chain")
    steps = _steps(("relu",), ("exp",))
    x = TensorSpec((2, 3), dt.FLOAT)
    for tap in (1, 2, 7):
        with pytest.raises(KernelAttributeError, match="can write out the result of steps 0 to 0"):
            kdef.infer([x], kdef.check_attrs({"steps": steps, "x_dtype": "float", "tap": tap}))
    attrs = kdef.check_attrs({"steps": steps, "x_dtype": "float", "tap": 0})
    with pytest.raises(KernelAttributeError, match=r"makes 2 output\(s\).*got 1 output slot"):
        kdef.check_outputs(1, kdef.infer([x], attrs))
    with pytest.raises(KernelAttributeError, match=r"has outputs \(y, tapped\?\), got 3"):
        kdef.check_arity(1, 3)


WIDENINGS = [("half", "float"), ("bfloat16", "float"), ("float16", "float"), ("float", "double")]


@pytest.mark.parametrize(("narrow", "wide"), WIDENINGS)
def test_an_operand_widened_as_the_chain_loads_it_is_the_cast_kernel_before_it(narrow, wide):
    """The skip connection of an inverted residual block, a half conv result, read by the
    chain that adds it in float: loaded and widened, as a cast kernel would have, bit for
    bit, and read from DRAM at its own two bytes an element."""
    rng = np.random.default_rng(4)
    x = operand(rng.standard_normal((2, 8, 4, 4)) * 3, wide)
    skip = operand(rng.standard_normal((2, 8, 4, 4)) * 3, narrow)
    scale = operand(rng.standard_normal((8, 1, 1)), wide)
    steps = [("mul", {}, [2]), ("add", {}, [1]), ("relu", {})]
    cast = one_by_one(skip, [("cast", {"to": wide})])
    want = one_by_one(x, steps, [cast, scale])
    (got,) = as_chain(x, steps, [skip, scale], widen=f",{wide},")
    assert got[1] is want[1] and got[0].tobytes() == want[0].tobytes()
    kdef = lookup("chain")
    specs = [TensorSpec(a.shape, d) for a, d in (x, skip, scale)]
    base = {"steps": _dumps(steps), "x_dtype": wide, "operand_dtypes": f"{narrow},{wide}"}
    loaded = model_kernel_call(MNCORE2, kdef, specs, [specs[0]], {**base, "widen": f",{wide},"})
    wide_specs = [specs[0], TensorSpec(specs[1].shape, dt.dtype(wide)), specs[2]]
    as_wide = {**base, "operand_dtypes": f"{wide},{wide}"}
    read_wide = model_kernel_call(MNCORE2, kdef, wide_specs, [specs[0]], as_wide)
    assert read_wide.dram_bytes - loaded.dram_bytes == wide_specs[1].nbytes - specs[1].nbytes


def test_an_x_widened_as_the_chain_loads_it_serves_every_step_that_reads_it():
    """A hardswish reads x twice (x * clip(x / 6 + 0.5, 0, 1)), so no chain could start by
    widening x, a half conv result: loaded widened, x is what a cast kernel gave, bit for
    bit, and read from DRAM at two bytes an element."""
    rng = np.random.default_rng(6)
    x = operand(rng.standard_normal((2, 8, 4, 4)) * 4, "half")
    sixth, half = operand(np.float32(1 / 6), "float"), operand(np.float32(0.5), "float")
    zero, one = operand(np.float32(0.0), "float"), operand(np.float32(1.0), "float")
    steps = [("mul", {}, [1]), ("add", {}, [2]), ("maximum", {}, [3]), ("minimum", {}, [4]),
             ("mul", {}, [0])]  # fmt: skip
    widened = one_by_one(x, [("cast", {"to": "float"})])
    want = one_by_one(widened, steps, [sixth, half, zero, one])
    (got,) = as_chain(x, steps, [sixth, half, zero, one], widen="float,,,,")
    assert got[1] is want[1] is dt.FLOAT and got[0].tobytes() == want[0].tobytes()
    kdef = lookup("chain")
    ins = [TensorSpec(a.shape, d) for a, d in (x, sixth, half, zero, one)]
    base = {"steps": _dumps(steps), "x_dtype": "half", "operand_dtypes": "float,float,float,float"}
    loaded = model_kernel_call(MNCORE2, kdef, ins, [TensorSpec(x[0].shape, dt.FLOAT)],
                               {**base, "widen": "float,,,,"})  # fmt: skip
    wide = [TensorSpec(x[0].shape, dt.FLOAT), *ins[1:]]
    as_wide = {**base, "x_dtype": "float"}
    read_wide = model_kernel_call(MNCORE2, kdef, wide, [wide[0]], as_wide)
    # x read twice, by the first step and by the last: each time at its own two bytes
    assert read_wide.dram_bytes - loaded.dram_bytes == 2 * (wide[0].nbytes - ins[0].nbytes)


@pytest.mark.parametrize(
    ("operand_dtypes", "widen", "error", "message"),
    [("float", ",half", DTypeError, "loads input 1 .float. as half, which does not hold"),
     ("half", ",half", DTypeError, "does not hold every half value"),
     ("half", "double,bfloat16", DTypeError, "loads input 1 .half. as bfloat16"),
     ("half", "float", KernelAttributeError, "lists 1 dtype.s. for 2 input"),
     ("half", ",float,float", KernelAttributeError, "lists 3 dtype"),
     ("half", ",int32", KernelAttributeError, "must list at most"),
     ("half", ",quad", KernelAttributeError, "must list at most")],
)  # fmt: skip
def test_widen_only_to_a_larger_float_one_per_input(operand_dtypes, widen, error, message):
    kdef = lookup("chain")
    steps = _dumps([("add", {}, [1])])
    with pytest.raises(error, match=message):
        attrs = kdef.check_attrs({"steps": steps, "x_dtype": "float", "widen": widen,
                                  "operand_dtypes": operand_dtypes})  # fmt: skip
        x = TensorSpec((2, 3), dt.FLOAT)
        kdef.infer([x, TensorSpec((2, 3), dt.dtype(operand_dtypes))], attrs)


def test_batch_norm_and_relu_as_one_chain_price_below_three_launches():
    x = TensorSpec((1, 64, 56, 56), dt.FLOAT)
    scale = TensorSpec((64, 1, 1), dt.FLOAT)
    steps = _dumps([("mul", {}, [1]), ("add", {}, [2]), ("relu", {})])
    attrs = lookup("chain").check_attrs(
        {"steps": steps, "x_dtype": "float", "operand_dtypes": "float,float"}
    )
    ins = [x, scale, scale]
    whole = model_kernel_call(MNCORE2, lookup("chain"), ins, [x], attrs)
    alone = [
        model_kernel_call(MNCORE2, lookup(op), list(s.ins), [s.y], {})
        for op, s in zip(("mul", "add", "relu"), chain.plan(attrs, ins))
    ]
    # the input and output once each, and the parameters: the intermediates stay on chip
    assert whole.dram_bytes == 2 * x.nbytes + 2 * scale.nbytes
    assert sum(m.dram_bytes for m in alone) == 6 * x.nbytes + 2 * scale.nbytes
    assert whole.time_s < sum(m.time_s for m in alone)
    # operands kept in local memory come off DRAM (positions: x, the two operands, y)
    for onchip, off in (((1,), scale.nbytes), ((1, 2), 2 * scale.nbytes), ((3,), x.nbytes)):
        kept = model_kernel_call(MNCORE2, lookup("chain"), ins, [x], {**attrs, "onchip": onchip})
        assert kept.dram_bytes == whole.dram_bytes - off, onchip


def test_operands_must_be_the_dtypes_the_chain_was_made_for():
    steps = _dumps([("mul", {}, [1])])
    kdef = lookup("chain")
    attrs = kdef.check_attrs({"steps": steps, "x_dtype": "float", "operand_dtypes": "float"})
    x = TensorSpec((2, 3), dt.FLOAT)
    assert kdef.infer([x, TensorSpec((3,), dt.FLOAT)], attrs)[0].shape == (2, 3)
    for ins in ([x, TensorSpec((3,), dt.HALF)], [x], [x, x, x]):
        with pytest.raises(DTypeError, match="made for operands of dtypes"):
            kdef.infer(ins, attrs)
    with pytest.raises(KernelAttributeError, match="'operand_dtypes' must list"):
        kdef.check_attrs({"steps": steps, "x_dtype": "float", "operand_dtypes": "float,quad"})


def _price(steps: list[tuple[str, dict]], x: TensorSpec, onchip=()) -> tuple:
    """(the chain's price, each step's price alone), both with the ends at `onchip`."""
    attrs = _attrs(chain.dumps([{"op": o, "attrs": a} for o, a in steps]), x.dtype.name)
    plan = chain.plan(attrs, [x])
    extra = {"onchip": tuple(onchip)} if onchip else {}
    whole = model_kernel_call(MNCORE2, lookup("chain"), [x], [plan[-1].y], {**attrs, **extra})
    alone = []
    for i, s in enumerate(plan):
        ends = tuple(p for p in onchip if (p, i) in ((0, 0), (1, len(plan) - 1)))
        a = {**s.attrs, **({"onchip": ends} if ends else {})}
        alone.append(model_kernel_call(MNCORE2, s.kdef, [s.x], [s.y], a))
    return whole, alone


@pytest.mark.parametrize("onchip", [(), (0,), (1,), (0, 1)])
@pytest.mark.parametrize(
    "step",
    [("relu", {}), ("max_pool2d", {"kernel": (2, 2)}), ("cast", {"to": "half"}), ("softmax", {})],
)
def test_a_one_step_chain_is_priced_as_its_step(step, onchip):
    whole, (alone,) = _price([step], TensorSpec((8, 32, 64, 64), dt.FLOAT), onchip)
    assert whole == alone


@given(chains(), st.sampled_from([(), (0,), (1,), (0, 1)]), st.integers(0, 2))
@settings(max_examples=40, deadline=None)
def test_a_longer_chain_is_priced_below_its_steps_one_by_one(case, onchip, scale):
    steps, values = case
    x = TensorSpec(tuple(d * 16**scale for d in values.shape), dt.FLOAT)
    try:
        whole, alone = _price(steps, x, onchip)
    except MnrtError:  # a reshape of the small shape does not fit the scaled one
        return
    total = sum(m.time_s for m in alone)
    assert whole.time_s <= total - (len(steps) - 1) * MNCORE2.kernel_launch_s + 1e-15
    assert whole.flops == pytest.approx(sum(m.flops for m in alone))
    assert whole.dram_bytes <= sum(m.dram_bytes for m in alone)


# Steps that are not pointwise: their intermediates are held whole (a pointwise pair's are
# streamed, see the test after these).
WHOLE = [("softmax", {}), ("cumsum", {"axis": 0}), ("softmax", {})]


def test_intermediates_that_do_not_fit_local_memory_go_through_dram():
    capacity = MNCORE2.pe_count * MNCORE2.lm_bytes_per_pe
    steps = WHOLE
    small = TensorSpec((capacity // 8,), dt.FLOAT)  # half the local memory each
    big = TensorSpec((capacity // 2,), dt.FLOAT)  # twice it
    for x, spilled in ((small, 0), (big, 2)):
        whole, _ = _price(steps, x)
        assert whole.dram_bytes == 2 * x.nbytes + spilled * 2 * x.nbytes


def test_intermediates_take_only_the_local_memory_left_to_the_chain():
    steps = WHOLE
    x = TensorSpec((1 << 16,), dt.FLOAT)  # 256 KiB an intermediate
    attrs = _attrs(chain.dumps([{"op": o, "attrs": a} for o, a in steps]), "float")
    assert attrs["lm_room"] == chain.WHOLE_CHIP
    for room, spilled in (
        (chain.WHOLE_CHIP, 0),
        (2 * x.nbytes, 0),  # both intermediates: the second beside the first
        (2 * x.nbytes - 1, 1),
        (x.nbytes - 1, 2),
        (0, 2),
    ):
        whole = model_kernel_call(MNCORE2, lookup("chain"), [x], [x], {**attrs, "lm_room": room})
        assert whole.dram_bytes == 2 * x.nbytes + spilled * 2 * x.nbytes, room
    with pytest.raises(KernelAttributeError, match="'lm_room' must be a number of bytes"):
        lookup("chain").check_attrs({**attrs, "lm_room": -2})


def test_an_intermediate_between_pointwise_steps_is_streamed_whatever_the_room():
    """relu, neg, abs (and casts) compute element by element: loop fusion streams their
    intermediates through local memory in tiles, so none makes a DRAM round trip even when
    the whole of it would not fit; a softmax between them needs its input whole."""
    x = TensorSpec((1 << 16,), dt.FLOAT)  # 256 KiB an intermediate
    for steps, held in (
        ([("relu", {}), ("cast", {"to": "half"}), ("neg", {}), ("abs", {})], 0),
        ([("relu", {}), ("softmax", {}), ("abs", {})], 2),
    ):
        attrs = _attrs(chain.dumps([{"op": o, "attrs": a} for o, a in steps]), "float")
        y = chain.plan(attrs, [x])[-1].y
        ends = x.nbytes + y.nbytes
        for room in (chain.WHOLE_CHIP, 0):
            whole = model_kernel_call(
                MNCORE2, lookup("chain"), [x], [y], {**attrs, "lm_room": room}
            )
            spilled = held if room == 0 else 0
            assert whole.dram_bytes == ends + spilled * 2 * x.nbytes, (steps, room)


def test_chain_errors_compose_its_steps():
    x = TensorSpec((4, 64), dt.FLOAT)
    steps = [("softmax", {}), ("cast", {"to": "half"}), ("exp", {})]
    attrs = _attrs(chain.dumps([{"op": o, "attrs": a} for o, a in steps]), "float")
    plan = chain.plan(attrs, [x])
    want, rounded = [0.01], None
    for s in plan:
        want = tolerance.kernel_errors(s.kdef, [s.x], [s.y], s.attrs, want)
        rounded = rounded or want  # the softmax's: the tapped step's result below
    assert tolerance.kernel_errors(lookup("chain"), [x], [plan[-1].y], attrs, [0.01]) == want
    tapped = {**attrs, "tap": 0}
    got = tolerance.kernel_errors(lookup("chain"), [x], [plan[-1].y, plan[0].y], tapped, [0.01])
    assert got == want + rounded
    assert tolerance.terms(lookup("chain"), [x], attrs) == 64 + 0 + 1


def test_the_attribute_is_canonical_compact_json():
    steps = json.dumps([{"op": "max_pool2d", "attrs": {"kernel": [2, 2], "stride": []}}])
    attrs = _attrs(steps, "float")
    assert attrs["steps"] == '[{"op":"max_pool2d","attrs":{"kernel":[2,2]}}]'
    assert _attrs(attrs["steps"], "float") == attrs
    assert chain.steps_of(attrs)[0][1]["kernel"] == (2, 2)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("[", "not a JSON list"),
        ("[" * 100_000, "characters long"),
        ("[" * 50_000, "nests too deeply"),
        ("{}", "JSON list of 1 to"),
        ("[]", "JSON list of 1 to"),
        (json.dumps([{"op": "relu"}] * (chain.MAX_STEPS + 1)), "JSON list of 1 to"),
        ('[{"op":"nope"}]', "unknown kernel 'nope'"),
        ('[{"op":"chain"}]', "cannot hold a chain"),
        ('[{"op":"add"}]', "takes inputs (a, b)"),
        ('[{"op":"topk","attrs":{"k":1}}]', "gives outputs (values, indices)"),
        ('[{"op":"fill","attrs":{"shape":[1],"value":0}}]', "takes inputs ()"),
        ('[{"op":"relu","attrs":{"onchip":[0]}}]', "own attributes"),
        ('[{"op":"relu","attrs":[1]}]', "own attributes"),
        ('[{"op":"relu","more":1}]', "must be {"),
        ('[{"op":3}]', "must be a kernel name"),
        ('[{"op":"cast","attrs":{"to":"quad"}}]', "valid values are"),
        ('[{"op":"cast","attrs":{"to":[1]}}]', "must be str"),
        ('[{"op":"relu","attrs":{"alpha":1}}]', "has no attribute"),
        ('[{"op":"clip","attrs":{"min":1' + "0" * 400 + "}}]", "beyond int64"),
        ('[{"op":"reshape","attrs":{"shape":[1,' + "9" * 30 + "]}}]", "beyond int64"),
        ("[1]", "must be {"),
    ],
)
def test_hostile_steps_are_refused_by_the_attribute_check(steps, message):
    with pytest.raises(KernelAttributeError, match="kernel 'chain'") as e:
        _attrs(steps, "float")
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("steps", "x", "error", "message"),
    [
        (_steps(("relu",)), TensorSpec((2,), dt.HALF), DTypeError, "made for a float input"),
        (
            _steps(("cast", {"to": "bool"}), ("exp",)),
            TensorSpec((2,), dt.FLOAT),
            DTypeError,
            "step 1 (exp)",
        ),
        (
            _steps(
                ("max_pool2d", {"kernel": [2, 2]}),
            ),
            TensorSpec((2, 3), dt.FLOAT),
            ShapeError,
            "step 0 (max_pool2d)",
        ),
        (
            _steps(
                ("reshape", {"shape": [5]}),
            ),
            TensorSpec((2, 3), dt.FLOAT),
            ShapeError,
            "step 0 (reshape)",
        ),
        (
            _steps(
                ("expand", {"shape": [1 << 20, 1 << 20]}),
            ),
            TensorSpec((1,), dt.FLOAT),
            KernelAttributeError,
            "step 0 (expand)'s result",
        ),
    ],
)
def test_steps_that_do_not_fit_the_input_are_refused_before_anything_runs(steps, x, error, message):
    with pytest.raises(error) as e:
        lookup("chain").infer([x], _attrs(steps, "float"))
    assert message in str(e.value)


_json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(10**400), 10**400), st.floats(), st.text(max_size=6)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
_ops = st.sampled_from([k.name for k in all_kernels()])


@st.composite
def _hostile_steps(draw):
    steps = []
    for _ in range(draw(st.integers(0, 4))):
        op = draw(_ops)
        names = st.sampled_from([*lookup(op).attrs, "onchip", "x"])
        attrs = draw(st.dictionaries(names, _json_values, max_size=3))
        step = draw(st.sampled_from([{"op": op, "attrs": attrs}, {"op": op}, attrs]))
        if draw(st.booleans()):
            step["with"] = draw(st.one_of(st.lists(st.integers(-1, 3), max_size=3), _json_values))
        if draw(st.booleans()):
            step["at"] = draw(st.one_of(st.integers(-1, 3), _json_values))
        steps.append(step)
    return json.dumps(draw(st.one_of(st.just(steps), _json_values)))


_specs = st.lists(
    st.tuples(st.lists(st.integers(0, 6), max_size=4), st.sampled_from(sorted(dt.DTYPES))),
    max_size=3,
)


@given(
    _hostile_steps(),
    st.sampled_from(sorted(dt.DTYPES)),
    st.lists(st.integers(0, 6), max_size=4),
    _specs,
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arbitrary_steps_are_accepted_or_refused_with_an_mnrt_error(steps, x_dtype, shape, given):
    """What a hostile binary could hold: the attribute check and shape rules accept it or
    raise an MnrtError; what they accept runs on small operands, or refuses the same way."""
    specs = [TensorSpec(tuple(s), dt.DTYPES[d]) for s, d in given]
    try:
        attrs = lookup("chain").check_attrs(
            {"steps": steps, "x_dtype": x_dtype, "operand_dtypes": ",".join(d for _, d in given)}
        )
        x = TensorSpec(tuple(shape), dt.DTYPES[x_dtype])
        (out,) = lookup("chain").infer([x, *specs], attrs)
        model_kernel_call(
            MNCORE2, lookup("chain"), [x, *specs], [TensorSpec(out.shape, out.dtypes[0])], attrs
        )
    except MnrtError:
        return
    if math.prod(shape) <= 4096 and math.prod(out.shape) <= 4096:
        zeros = [(np.zeros(t.shape, t.dtype.storage), t.dtype) for t in (x, *specs)]
        steps = [
            (d["op"], d.get("attrs", {}), d.get("with", []), d.get("at", 0))
            for d in json.loads(attrs["steps"])  # canonical: every step checked
        ]
        with contextlib.suppress(MnrtError):
            as_chain(zeros[0], steps, zeros[1:])
