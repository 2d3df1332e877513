"""ONNX converters of losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, with
class weights, ignore_index and each reduction, against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx_one_node import check, one_node_model, run

import mnrt

RNG = np.random.default_rng(5)


def _case(shape=(3, 5, 2)):
    x = RNG.standard_normal(shape).astype(np.float32)
    target = RNG.integers(0, shape[1], (shape[0], *shape[2:])).astype(np.int64)
    target.flat[0] = -7  # the ignored class lies outside 0..C-1
    return x, target


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_losses_with_ignore_index(ctx, op, reduction, weighted):
    x, t = _case()
    inits = {"w": RNG.uniform(0.5, 2, 5).astype(np.float32)} if weighted else {}
    model = one_node_model(op, {"x": x, "t": t}, ["loss"], inits=inits, reduction=reduction,
                           ignore_index=-7)  # fmt: skip
    check(ctx, model, {"x": x, "t": t})


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 2, 2)])
def test_losses_without_ignore_index_and_log_prob_output(ctx, shape):
    x, t = _case(shape)
    t.flat[0] = 1
    check(ctx, one_node_model("NegativeLogLikelihoodLoss", {"x": x, "t": t}, ["loss"]),
          {"x": x, "t": t})  # fmt: skip
    model = one_node_model("SoftmaxCrossEntropyLoss", {"x": x, "t": t}, ["loss", "logp"])
    check(ctx, model, {"x": x, "t": t})


def test_loss_of_unknown_reduction_is_invalid(ctx):
    x, t = _case()
    model = one_node_model("NegativeLogLikelihoodLoss", {"x": x, "t": t}, ["loss"],
                           reduction="max")  # fmt: skip
    with pytest.raises(mnrt.MnrtError, match="reduction.*max"):
        run(ctx, model, {"x": x, "t": t})
