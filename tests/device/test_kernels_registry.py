"""Registry-wide kernel checks: every kernel is documented, listed, launchable and priced."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kernel_harness import check_cost, operand, run_all, spec

from mnrt.device.kernels import REQUIRED, TensorSpec, all_kernels, lookup
from mnrt.device.kernels.registry import COMMON_ATTRS


# One small valid launch of every kernel: (operands, attributes).
def _samples() -> dict[str, tuple[list, dict]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    pos = np.abs(x) + np.float32(0.5)
    img = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    unary = {"log": pos, "sqrt": pos, "rsqrt": pos, "reciprocal": pos}
    out: dict[str, tuple[list, dict]] = {}
    for name in ("relu", "gelu", "silu", "sigmoid", "tanh", "exp", "neg", "abs", "erf"):
        out[name] = ([operand(x)], {})
    for name, v in unary.items():
        out[name] = ([operand(v)], {})
    for name in ("add", "sub", "mul", "div", "maximum", "minimum", "pow"):
        out[name] = ([operand(pos), operand(pos[0])], {})
    for name in ("equal", "less", "greater", "less_equal", "greater_equal"):
        out[name] = ([operand(x), operand(x[:, :1])], {})
    for name in ("sum", "mean", "max", "min", "prod", "l1", "l2", "sum_square", "log_sum"):
        out[name] = ([operand(pos)], {"axes": (1,)})
    out["logsumexp"] = ([operand(x)], {"axes": (1,)})
    trig = ("sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "softplus", "softsign")
    for name in (*trig, "sign", "floor", "ceil", "round", "isnan"):
        out[name] = ([operand(x)], {})
    for name in ("asin", "acos", "atanh"):
        out[name] = ([operand(np.tanh(x))], {})
    out["acosh"] = ([operand(pos + 1)], {})
    out["isinf"] = ([operand(x)], {"detect_negative": False})
    acts = ("elu", "selu", "celu", "leaky_relu", "thresholded_relu", "hard_sigmoid")
    for name in (*acts, "hard_swish", "mish", "shrink"):
        out[name] = ([operand(x)], {})
    out["clip"] = ([operand(x)], {"min": -0.5, "max": 0.5})
    ints = rng.integers(-50, 50, (2, 3, 4)).astype(np.int64)
    small = np.arange(24, dtype=np.uint8).reshape(2, 3, 4) % 7
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        out[name] = ([operand(ints), operand(ints[0])], {})
    out["bitwise_not"] = ([operand(ints)], {})
    out["bitshift"] = ([operand(small), operand(small[:, :1])], {"direction": "left"})
    out["mod"] = ([operand(ints), operand(ints[:, :1] | 1)], {"fmod": True})
    for name in ("logical_and", "logical_or", "logical_xor"):
        out[name] = ([operand(x > 0), operand(x[0] < 0)], {})
    out["logical_not"] = ([operand(x > 0)], {})
    idx = np.array([[[0, 1, 2, -1]] * 3] * 2, np.int64)
    for name in ("argmax", "argmin"):
        out[name] = ([operand(x)], {"axis": 1, "keepdims": False})
    out.update(
        {
            "gemm": ([operand(x), operand(x[0].T)], {}),
            "conv2d": (
                [operand(img), operand(img[:, :, :3, :3].repeat(3, 0))],
                {"padding": (1,) * 4},
            ),
            "softmax": ([operand(x)], {}),
            "log_softmax": ([operand(x)], {"axis": 0}),
            "layernorm": ([operand(x), operand(x[0]), operand(x[1])], {"axis": 1}),
            "rmsnorm": ([operand(x), operand(x[0, 0])], {}),
            "scale_shift": ([operand(x), operand(x[0, :, :1]), operand(x[1, :1])], {}),
            "max_pool2d": ([operand(img)], {"kernel": (3, 3), "stride": (2, 2)}),
            "avg_pool2d": ([operand(img)], {"kernel": (2, 2), "ceil_mode": True}),
            "global_avg_pool2d": ([operand(img)], {}),
            "transpose": ([operand(x)], {"perm": (2, 0, 1)}),
            "reshape": ([operand(x)], {"shape": (4, -1)}),
            "slice": ([operand(x)], {"starts": (1,), "ends": (0,), "axes": (2,), "steps": (-1,)}),
            "concat": ([operand(x), operand(x)], {"axis": -1}),
            "gather": ([operand(x), operand(np.array([1, -1], np.int32))], {"axis": 2}),
            "expand": ([operand(x[:, :1])], {"shape": (5, 2, 3, 4)}),
            "where": ([operand(x > 0), operand(x), operand(np.float32(0))], {}),
            "cast": ([operand(x)], {"to": "half"}),
            "bitcast": ([operand(x)], {"to": "int32"}),
            "fill": ([], {"shape": (2, 2), "value": 3.0, "dtype": "int32"}),
            "copy": ([operand(x, "half")], {}),
            "topk": ([operand(x)], {"k": 2}),
            "gather_elements": ([operand(x), operand(idx[:, :1])], {"axis": 1}),
            "gather_nd": ([operand(x), operand(np.array([[1, 0], [0, 2]], np.int32))], {}),
            "scatter_elements": (
                [operand(x), operand(idx[:, :1] % 3), operand(x[:, :1])],
                {"axis": 1, "reduction": "add"},
            ),
            "scatter_nd": (
                [operand(x), operand(np.array([[1], [0]], np.int64)), operand(x[::-1])],
                {"reduction": "max"},
            ),
            "onehot": ([operand(ints % 5), operand(np.array([0, 1], np.int8))], {"depth": 4}),
            "cumsum": ([operand(ints)], {"axis": -1, "exclusive": True}),
            "cumprod": ([operand(x)], {"axis": 1, "reverse": True}),
            "range": ([], {"start": 1, "limit": 10, "delta": 2, "dtype": "int64"}),
            "eye_like": ([operand(x[0])], {"k": 1}),
            "trilu": ([operand(x)], {"upper": False, "k": -1}),
            "depth_to_space": ([operand(img[:, :, :4, :4].repeat(2, 1))], {"blocksize": 2}),
            "space_to_depth": ([operand(img[:, :, :4, :4])], {"blocksize": 2}),
            "reverse_sequence": (
                [operand(x), operand(np.array([1, 2, 0], np.int64))],
                {"batch_axis": 1, "time_axis": 0},
            ),
            "resize": ([operand(img)], {"scales": (1, 1, 1.5, 0.6), "mode": "cubic"}),
            "grid_sample": (
                [operand(img), operand(x.reshape(1, 3, 4, 2) / 2)],
                {"mode": "cubic", "padding_mode": "reflection"},
            ),
            "conv_transpose2d": (
                [operand(img), operand(img[0, :, :3, :3].reshape(2, 1, 3, 3))],
                {"stride": (2, 2), "padding": (1, 1, 1, 1), "output_padding": (1, 0)},
            ),
            "pad": ([operand(x)], {"pads": (0, 1, -1, 2, 0, 1), "mode": "reflect"}),
            "tile": ([operand(x)], {"repeats": (1, 2, 3)}),
            "roll": ([operand(x)], {"shifts": (1, -2), "axes": (1, 2)}),
            "prelu": ([operand(x), operand(x[0, 0])], {}),
            "einsum": ([operand(x), operand(x)], {"equation": "bij,bkj->bik"}),
            "chain": (
                [operand(img, "half")],
                {
                    "steps": '[{"op":"cast","attrs":{"to":"float"}},'
                    '{"op":"max_pool2d","attrs":{"kernel":[2,2]}},{"op":"relu"}]',
                    "x_dtype": "half",
                },
            ),
            "relayout": (
                [operand(x)],
                {
                    "src": "((2_L2B:1,), (3_PE:1,), (4:1,))",
                    "dst": "((2_PE:1,), (3:1,), (4_L1B:1,))",
                },
            ),
        }
    )
    return out


SAMPLES = _samples()


def test_every_registered_kernel_has_a_sample_launch():
    names = [k.name for k in all_kernels()]
    assert names == sorted(set(names))
    missing = sorted(set(names) - set(SAMPLES))
    assert not missing, f"add a sample launch for {missing} to SAMPLES"
    assert set(SAMPLES) <= set(names)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_kernel_is_documented_and_listed(name):
    kdef = lookup(name)
    assert kdef in all_kernels()
    assert kdef.doc and "\n" not in kdef.doc and len(kdef.doc) <= 100
    for attr_name, attr in kdef.attrs.items():
        assert attr.doc, f"attribute {attr_name} of {name} has no doc"
        if attr.default is not REQUIRED:
            assert attr.check(name, attr_name, attr.default) == attr.default
    described = kdef.describe()
    assert described["name"] == name
    assert set(described["attrs"]) == {*kdef.attrs, *COMMON_ATTRS}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_launch_runs_with_finite_cost(name):
    ins, attrs = SAMPLES[name]
    kdef = lookup(name)
    specs = [TensorSpec(x[0].shape, x[1]) for x in ins]
    checked = kdef.check_attrs(attrs)
    outs = [TensorSpec(o.shape, o.dtypes[0]) for o in kdef.infer(specs, checked)]
    cost = kdef.cost(specs, outs, checked)
    check_cost(cost)
    if any(t.size for t in outs):  # a layout switch moves its bytes on chip instead
        on_chip = cost.sram_bytes + cost.l2bm_bytes + cost.lm_bytes
        assert cost.dram_bytes > 0 or (name == "relayout" and on_chip > 0)
    ys = run_all(name, *ins, **attrs)
    assert [y.shape for y in ys] == [o.shape for o in outs]
    if name in ("gemm", "conv2d"):
        assert cost.matrix and cost.flops > 0


def test_the_listing_is_strict_json():
    import mnrt

    listing = json.loads(json.dumps(mnrt.kernels(), allow_nan=False))
    clip = next(k for k in listing if k["name"] == "clip")
    assert clip["attrs"]["min"]["default"] == "-inf"
    topk = next(k for k in listing if k["name"] == "topk")
    assert topk["outputs"] == ["values", "indices"] and topk["attrs"]["k"]["required"]


def test_cost_of_empty_launches_is_finite():
    check_cost(
        lookup("conv2d").cost(
            [spec((0, 2, 3, 3)), spec((4, 2, 1, 1))],
            [spec((0, 4, 3, 3))],
            lookup("conv2d").check_attrs({}),
        )
    )
    check_cost(lookup("sum").cost([spec((0, 3))], [spec((1, 3))], lookup("sum").check_attrs({})))
