"""ai.onnx.preview.training's optimizer steps (ops/training.py) against ONNX's reference
evaluator (onnxruntime has no such ops): several tensors at once, the first step and a
later one, each mode and coefficient; and R or T the device computes, refused by name."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_one_node import node_model, run

from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError, from_onnx

RNG = np.random.default_rng(47)
DOMAIN = "ai.onnx.preview.training"
# the lists each op takes after R and T, and gives (X first)
LISTS = {"Adagrad": ("X", "G", "H"), "Momentum": ("X", "G", "V"), "Adam": ("X", "G", "V", "H")}


def _values(op: str, step: int) -> dict[str, np.ndarray]:
    """R, T, then two tensors of each list (accumulators non-negative, as squares are)."""
    values = {"R": np.array(0.1, np.float32), "T": np.array(step, np.int64)}
    for kind in LISTS[op]:
        for i, shape in enumerate([(3, 4), (5,)]):
            a = RNG.standard_normal(shape).astype(np.float32)
            values[f"{kind}{i}"] = np.abs(a) if kind in ("H", "V") and op != "Momentum" else a
    return values


@pytest.mark.parametrize("step", [0, 3])
@pytest.mark.parametrize(
    ("op", "attrs"),
    [("Adagrad", {"decay_factor": 0.1, "epsilon": 1e-6, "norm_coefficient": 0.01}),
     ("Adagrad", {}),
     ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01}),
     ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.0}),
     ("Adam", {"alpha": 0.8, "beta": 0.9, "epsilon": 1e-6, "norm_coefficient": 0.01,
               "norm_coefficient_post": 0.05}),
     ("Adam", {"epsilon": 1e-6})],
    ids=["adagrad", "adagrad-defaults", "momentum", "nesterov", "adam", "adam-defaults"],
)  # fmt: skip
def test_optimizer_steps_match_onnx_s_reference(ctx, op, attrs, step):
    values = _values(op, step)
    outputs = tuple(f"{kind}{i}_new" for kind in (LISTS[op][0], *LISTS[op][2:]) for i in (0, 1))
    tensors = {k for k in values if k not in ("R", "T")}
    model = node_model(op, values, tensors, 18, domain=DOMAIN, outputs=outputs, **attrs)
    feeds = {k: values[k] for k in tensors}
    want = ReferenceEvaluator(model).run(None, feeds)
    got = run(ctx, model, feeds)
    # The reference takes the update's last steps in float64 (its rate is a float64
    # scalar) and the device in float32: X - step loses a few float32 ulps of |X| (up to
    # ~3 here) where the two nearly cancel.
    for name, g, w in zip(outputs, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=2e-6, err_msg=name)


def test_a_rate_or_step_the_device_computes_is_refused_by_name():
    values = _values("Adagrad", 1)
    model = node_model("Adagrad", values, set(values) - {"T"}, 18, domain=DOMAIN,
                       outputs=("X0_new", "X1_new", "H0_new", "H1_new"))  # fmt: skip
    relu = helper.make_node("Relu", ["R"], ["R_computed"])
    model.graph.node[0].input[0] = "R_computed"
    model.graph.node.insert(0, relu)
    with pytest.raises(UnsupportedModelError, match=r"the learning rate R \('R_computed'\)"):
        from_onnx(model)


def test_lists_of_unequal_length_are_invalid():
    values = _values("Adagrad", 1)
    del values["H1"]
    model = node_model("Adagrad", values, set(), 18, domain=DOMAIN, outputs=("X0_new", "H0_new"))
    with pytest.raises(InvalidModelError, match="5 inputs after R and T: 3 lists of equal"):
        from_onnx(model)
