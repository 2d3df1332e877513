"""A chain headed by a matrix kernel (gemm, conv2d) and its epilogue: bitwise what the
kernels compute one by one, priced by the head's mapping with its result never crossing
DRAM, and refused where the steps after the head are no epilogue."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kernel_harness import operand, run, run_all

from mnrt.compiler.mapper import default_mapping
from mnrt.device import dtypes as dt
from mnrt.device.kernels import TensorSpec, chain, lookup
from mnrt.device.mapping import Mapping, model_kernel_call, problem_of
from mnrt.device.spec import MNCORE2
from mnrt.errors import KernelAttributeError, ShapeError

CONV = {"padding": [1, 1, 1, 1]}


def _block(rng, dtype: str):
    """A residual block's last convolution and its skip connection (float, as mixed
    precision keeps it)."""
    x = operand(rng.standard_normal((2, 8, 6, 6)), dtype)
    w = operand(rng.standard_normal((16, 8, 3, 3)) * 0.2, dtype)
    b = operand(rng.standard_normal(16), dtype)
    skip = operand(rng.standard_normal((2, 16, 6, 6)), "float")
    return x, w, b, skip


def _epilogue(dtype: str, skip: int = 3) -> list[dict]:
    """Widen the head's result, add the skip, ReLU, round back: a ResNet block's end."""
    widen = [{"op": "cast", "attrs": {"to": "float"}}] if dtype != "float" else []
    back = [{"op": "cast", "attrs": {"to": dtype}}] if dtype != "float" else []
    return [*widen, {"op": "add", "with": [skip]}, {"op": "relu"}, *back]


def _headed(steps: list[dict], ins, **extra) -> dict:
    return {
        "steps": chain.dumps(steps),
        "x_dtype": ins[0][1].name,
        "operand_dtypes": ",".join(d.name for _, d in ins[1:]),
        **extra,
    }


def _mapping(op: str, ins: list[TensorSpec], outs: list[TensorSpec], attrs: dict) -> tuple:
    flops = lookup(op).cost(ins, outs, lookup(op).check_attrs(attrs)).flops
    return default_mapping(MNCORE2, problem_of(op, ins, outs, attrs, flops)).to_attr()


@pytest.mark.parametrize("dtype", ["float", "half"])
def test_a_conv_and_its_epilogue_are_bitwise_the_kernels_one_by_one(dtype):
    x, w, b, skip = _block(np.random.default_rng(0), dtype)
    y = run("conv2d", x, w, b, **CONV)
    want = operand(y, dtype)
    for step in _epilogue(dtype):
        others = [skip] if step.get("with") else []
        want = operand(run(step["op"], want, *others, **step.get("attrs", {})), None)
    head = {"op": "conv2d", "attrs": CONV, "with": [1, 2]}
    got = run("chain", x, w, b, skip, **_headed([head, *_epilogue(dtype)], [x, w, b, skip]))
    assert got.dtype == want[0].dtype and got.tobytes() == want[0].tobytes()


def test_a_gemm_with_its_bias_after_it_is_bitwise_the_kernels_one_by_one():
    rng = np.random.default_rng(1)
    a, b = (
        operand(rng.standard_normal((3, 5, 7)), "float"),
        operand(rng.standard_normal((7, 4)), "float"),
    )
    bias = operand(rng.standard_normal(4), "float")
    want = run("add", operand(run("gemm", a, b), "float"), bias)
    steps = [{"op": "gemm", "with": [1]}, {"op": "add", "with": [2]}, {"op": "gelu"}]
    got = run_all("chain", a, b, bias, **_headed(steps, [a, b, bias]))[0]
    assert got.tobytes() == run("gelu", operand(want, "float")).tobytes()


def _specs(*shapes_dtypes) -> list[TensorSpec]:
    return [TensorSpec(s, d) for s, d in shapes_dtypes]


def test_a_headed_chain_is_priced_by_its_mapping_below_the_kernels_one_by_one():
    """The price is the head's with its mapping: the epilogue's flops at the vector rate,
    the skip read and the output written once, the head's result never in DRAM; a launch
    and a round trip less than the conv and a chain of its epilogue."""
    x, w, b, skip = (TensorSpec(t[0].shape, t[1]) for t in _block(np.random.default_rng(0), "half"))
    conv_out = TensorSpec((2, 16, 6, 6), x.dtype)
    conv_attrs = lookup("conv2d").check_attrs(CONV)
    mapping = _mapping("conv2d", [x, w, b], [conv_out], conv_attrs)
    alone = model_kernel_call(
        MNCORE2, lookup("conv2d"), [x, w, b], [conv_out], {**conv_attrs, "mapping": mapping}
    )
    tail = lookup("chain").check_attrs(
        {"steps": chain.dumps(_epilogue("half", 1)), "x_dtype": "half", "operand_dtypes": "float"}
    )
    after = model_kernel_call(MNCORE2, lookup("chain"), [conv_out, skip], [conv_out], tail)
    head = {"op": "conv2d", "attrs": CONV, "with": [1, 2]}
    ins = [x, w, b, skip]
    attrs = lookup("chain").check_attrs(
        {
            "steps": chain.dumps([head, *_epilogue("half")]),
            "x_dtype": "half",
            "operand_dtypes": "half,half,float",
            "mapping": mapping,
        }
    )
    fused = model_kernel_call(MNCORE2, lookup("chain"), ins, [conv_out], attrs)
    assert fused.time_s < alone.time_s + after.time_s
    assert fused.energy_j < alone.energy_j + after.energy_j
    assert fused.dram_bytes == alone.dram_bytes - conv_out.nbytes + skip.nbytes + conv_out.nbytes
    # the mapping decides it: another grid, another price
    other = Mapping.from_attr(mapping)
    other = Mapping(1, 1, 1, 1, 4, 4, other.tile_k, other.accum, other.keep).to_attr()
    slower = model_kernel_call(
        MNCORE2, lookup("chain"), ins, [conv_out], {**attrs, "mapping": other}
    )
    assert slower.time_s > fused.time_s


def test_a_chain_that_holds_no_matrix_kernel_takes_no_mapping():
    spec = TensorSpec((4, 4), dt.FLOAT)
    attrs = lookup("chain").check_attrs(
        {"steps": '[{"op":"relu"}]', "x_dtype": "float", "mapping": (1, 1, 1, 1, 4, 4, 4, 2, 0)}
    )
    with pytest.raises(ValueError, match="holds no matrix kernel"):
        model_kernel_call(MNCORE2, lookup("chain"), [spec], [spec], attrs)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"op": "gemm", "with": [1]}, {"op": "gemm", "with": [2]}], "one matrix kernel"),
        ([{"op": "relu"}, {"op": "gemm", "with": [0]}], "not x"),
        ([{"op": "gemm", "with": [0]}], "not x"),
        ([{"op": "gemm", "with": [1], "at": 1}], "takes the result before it first"),
        ([{"op": "gemm", "with": [1]}, {"op": "softmax"}], "pointwise kernels"),
        (
            [{"op": "gemm", "with": [1]}, {"op": "slice", "attrs": {"starts": [0], "ends": [1]}}],
            "rearrange",
        ),
        ([{"op": "gemm", "with": [1]}, {"op": "add", "with": [1]}], "operands after"),
        ([{"op": "gemm", "with": [1]}, {"op": "add", "with": [0]}], "operands after"),
        ([{"op": "softmax"}, {"op": "gemm", "with": [1]}], "prologue"),
        ([{"op": "add", "with": [1]}, {"op": "gemm", "with": [1]}], "operands before"),
        ([{"op": "add", "with": [2]}, {"op": "gemm", "with": [1]}], "operands before"),
    ],
)
def test_steps_around_a_matrix_kernel_that_are_no_prologue_or_epilogue_are_refused(steps, message):
    with pytest.raises(KernelAttributeError, match="kernel 'chain'") as e:
        lookup("chain").check_attrs(
            {"steps": json.dumps(steps), "x_dtype": "float", "operand_dtypes": "float,float"}
        )
    assert message in str(e.value)


def test_an_epilogue_that_changes_the_result_s_shape_is_refused():
    """Squeeze-excite's gate scales a larger activation: not the gate conv's epilogue."""
    steps = [{"op": "gemm", "with": [1]}, {"op": "mul", "with": [2]}]
    attrs = lookup("chain").check_attrs(
        {"steps": json.dumps(steps), "x_dtype": "float", "operand_dtypes": "float,float"}
    )
    f = dt.FLOAT
    ins = [TensorSpec((1, 3), f), TensorSpec((3, 1), f), TensorSpec((5, 1), f)]
    with pytest.raises(
        ShapeError, match="pointwise step of a matrix kernel's prologue or epilogue keeps"
    ):
        lookup("chain").infer(ins, attrs)


def test_a_projection_stores_its_result_as_attention_heads_bitwise():
    """gemm, bias add, then the heads split (reshape, transpose) and scaled: the epilogue
    stores each block where the rearrangement puts it, the same bits as the kernels."""
    rng = np.random.default_rng(2)
    a, w = (
        operand(rng.standard_normal((2, 6, 8)), "half"),
        operand(rng.standard_normal((8, 8)), "half"),
    )
    bias = operand(rng.standard_normal(8), "float")
    tail = [
        {"op": "cast", "attrs": {"to": "float"}},
        {"op": "add", "with": [2]},
        {"op": "reshape", "attrs": {"shape": [2, 6, 2, 4]}},
        {"op": "transpose", "attrs": {"perm": [0, 2, 1, 3]}},
        {"op": "mul", "with": [3]},
    ]
    scale = operand(np.full((1,), 0.5), "float")
    want = operand(run("gemm", a, w), "half")
    for step in tail:
        others = [{2: bias, 3: scale}[k] for k in step.get("with", [])]
        want = operand(run(step["op"], want, *others, **step.get("attrs", {})), None)
    steps = [{"op": "gemm", "with": [1]}, *tail]
    got = run("chain", a, w, bias, scale, **_headed(steps, [a, w, bias, scale]))
    assert got.shape == (2, 2, 6, 4) and got.tobytes() == want[0].tobytes()


def test_a_headed_chain_s_terms_are_its_head_s_or_its_epilogue_operands():
    """What `--locate`'s verdict allows a result that cancels to near zero (KernelDef.terms):
    a conv's products and bias, or the skip its epilogue adds; a chain of vector kernels
    does not say."""
    head = {"op": "conv2d", "attrs": CONV, "with": [1, 2]}
    attrs = lookup("chain").check_attrs(
        {
            "steps": chain.dumps([head, *_epilogue("float")]),
            "x_dtype": "float",
            "operand_dtypes": "float,float,float",
        }
    )
    kdef = lookup("chain")
    assert kdef.term_scale([2.0, 3.0, 1.0, 0.5], attrs) == 6.0
    assert kdef.term_scale([2.0, 3.0, 7.0, 0.5], attrs) == 7.0
    assert kdef.term_scale([1e-6, 1e-3, 1e-9, 4.0], attrs) == 4.0
    tail = lookup("chain").check_attrs(
        {"steps": chain.dumps(_epilogue("float", 1)), "x_dtype": "float", "operand_dtypes": "float"}
    )
    assert kdef.term_scale([2.0, 3.0], tail) is None


def test_a_squeeze_excite_scaling_is_the_projection_s_prologue_bitwise():
    """Squeeze-excite's gate scales the activation the projection conv reads: applied as
    the conv loads its input (the prologue), the same bits as the kernels one by one, and
    priced below them."""
    rng = np.random.default_rng(3)
    x = operand(rng.standard_normal((1, 8, 6, 6)), "half")
    gate = operand(rng.uniform(0, 1, (1, 8, 1, 1)), "float")
    w, b = operand(rng.standard_normal((16, 8, 1, 1)) * 0.3, "half"), operand(np.zeros(16), "half")
    prologue = [
        {"op": "cast", "attrs": {"to": "float"}},
        {"op": "mul", "with": [1]},
        {"op": "cast", "attrs": {"to": "half"}},
    ]
    scaled = operand(run("cast", x, to="float"), "float")
    scaled = operand(run("cast", operand(run("mul", scaled, gate), "float"), to="half"), "half")
    want = run("conv2d", scaled, w, b)
    steps = [*prologue, {"op": "conv2d", "with": [2, 3]}]
    got = run("chain", x, gate, w, b, **_headed(steps, [x, gate, w, b]))
    assert got.tobytes() == want.tobytes()
    specs = [TensorSpec(t[0].shape, t[1]) for t in (x, gate, w, b)]
    out = [TensorSpec((1, 16, 6, 6), dt.HALF)]
    conv_attrs = lookup("conv2d").check_attrs({})
    mapping = _mapping("conv2d", [specs[0], w_spec := specs[2], specs[3]], out, conv_attrs)
    alone = model_kernel_call(
        MNCORE2,
        lookup("conv2d"),
        [specs[0], w_spec, specs[3]],
        out,
        {**conv_attrs, "mapping": mapping},
    )
    scale = lookup("chain").check_attrs(
        {"steps": chain.dumps(prologue), "x_dtype": "half", "operand_dtypes": "float"}
    )
    before = model_kernel_call(MNCORE2, lookup("chain"), specs[:2], [specs[0]], scale)
    attrs = lookup("chain").check_attrs({**_headed(steps, [x, gate, w, b]), "mapping": mapping})
    fused = model_kernel_call(MNCORE2, lookup("chain"), specs, out, attrs)
    assert fused.time_s < before.time_s + alone.time_s
    assert fused.dram_bytes == alone.dram_bytes + specs[1].nbytes  # the gate, once


def test_a_prologue_makes_the_matrix_kernel_s_terms_as_large_as_its_result():
    """The scale the matrix kernel reads after a prologue: a gate's product, and a sigmoid
    of values near zero near one half (not their own tiny scale)."""
    kdef = lookup("chain")
    scaled = lookup("chain").check_attrs(
        {
            "steps": chain.dumps([{"op": "mul", "with": [1]}, {"op": "conv2d", "with": [2, 3]}]),
            "x_dtype": "float",
            "operand_dtypes": "float,float,float",
        }
    )
    assert kdef.term_scale([2.0, 0.5, 3.0, 0.1], scaled) == 3.0
    squashed = lookup("chain").check_attrs(
        {
            "steps": chain.dumps([{"op": "sigmoid"}, {"op": "gemm", "with": [1]}]),
            "x_dtype": "float",
            "operand_dtypes": "float",
        }
    )
    assert kdef.term_scale([1e-6, 2.0], squashed) == pytest.approx(1.0, rel=1e-5)
