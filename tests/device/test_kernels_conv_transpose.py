"""conv_transpose2d against ONNX's reference ConvTranspose (float64, to 1e-12) over
strides, pads, output_padding, dilations and groups, and its dtype and shape rules."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import infer, onnx_reference, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.errors import DTypeError, KernelAttributeError, ShapeError

pytest.importorskip("onnx")

CASES = [
    # (x shape, w shape, stride, padding (t, l, b, r), output_padding, dilation, groups)
    ((1, 1, 3, 3), (1, 2, 3, 3), (1, 1), (0, 0, 0, 0), (0, 0), (1, 1), 1),
    ((1, 2, 3, 4), (2, 3, 3, 2), (3, 2), (0, 0, 0, 0), (1, 1), (1, 1), 1),
    ((2, 2, 3, 3), (2, 2, 3, 3), (2, 2), (1, 2, 0, 1), (0, 0), (1, 1), 1),
    ((1, 1, 3, 3), (1, 1, 2, 2), (1, 1), (0, 0, 0, 0), (0, 0), (2, 2), 1),
    ((1, 4, 3, 3), (4, 1, 3, 3), (2, 1), (1, 1, 1, 1), (1, 0), (1, 1), 2),
    ((1, 6, 2, 5), (6, 2, 1, 3), (1, 2), (0, 1, 0, 1), (0, 1), (1, 2), 3),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("x_shape,w_shape,stride,padding,output_padding,dilation,groups", CASES)
def test_conv_transpose2d_matches_onnx(
    x_shape, w_shape, stride, padding, output_padding, dilation, groups, with_bias
):
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(w_shape)
    o = w_shape[1] * groups
    b = rng.standard_normal(o)
    ins = [operand(x, "double"), operand(w, "double")]
    if with_bias:
        ins.append(operand(b, "double"))
    attrs = {
        "stride": stride,
        "padding": padding,
        "output_padding": output_padding,
        "dilation": dilation,
        "groups": groups,
    }
    got = run("conv_transpose2d", *ins, **attrs)
    # Group by group: this onnx wheel's reference mis-reshapes grouped weights.
    cg = x_shape[1] // groups
    parts = [
        onnx_reference(
            "ConvTranspose",
            x[:, g * cg : (g + 1) * cg],
            w[g * cg : (g + 1) * cg],
            strides=list(stride),
            pads=list(padding),
            output_padding=list(output_padding),
            dilations=list(dilation),
            kernel_shape=list(w_shape[2:]),
        )[0]
        for g in range(groups)
    ]
    want = np.concatenate(parts, axis=1) + (b[:, None, None] if with_bias else 0)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv_transpose2d_half_sums_in_float32_and_may_write_float():
    x = np.ones((1, 1, 1, 1), np.float32)
    w = np.full((1, 1, 2, 2), 3.0, np.float32)
    y = run("conv_transpose2d", operand(x, "half"), operand(w, "half"), out_dtype="float")
    assert y.dtype == np.float32 and y.tolist() == [[[[3.0, 3.0], [3.0, 3.0]]]]
    assert infer("conv_transpose2d", spec((1, 1, 2, 2), "bfloat16"), spec((1, 1, 1, 1),
                 "bfloat16"))[0].dtypes == (dt.BFLOAT16, dt.FLOAT)  # fmt: skip


@pytest.mark.parametrize(
    "specs,attrs,error,match",
    [
        ([spec((1, 2, 3, 3), "int32"), spec((2, 1, 3, 3), "int32")], {}, DTypeError, "floating"),
        ([spec((1, 2, 3, 3)), spec((3, 1, 3, 3))], {}, ShapeError, "C = 2"),
        ([spec((1, 3, 3, 3)), spec((3, 1, 3, 3))], {"groups": 2}, KernelAttributeError, "groups"),
        ([spec((1, 1, 3, 3)), spec((1, 1, 3, 3))], {"output_padding": (1, 0)},
         KernelAttributeError, "output_padding"),
        ([spec((1, 1, 1, 1)), spec((1, 1, 1, 1))], {"padding": (1, 0, 0, 0)}, ShapeError,
         "crops"),
    ],
)  # fmt: skip
def test_conv_transpose2d_refuses_bad_operands(specs, attrs, error, match):
    with pytest.raises(error, match=match):
        infer("conv_transpose2d", *specs, **attrs)
