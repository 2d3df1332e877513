"""Small ONNX models of the ops whose import a change to the frontend moves: written to a
folder for bench_presets.py --op-models, so that the figures a converter's commit cites can
be had again on any checkout.

- activations: four 3x3 convs (16 channels, 56x56), each followed by HardSwish, LeakyRelu,
  Mish or Elu;
- reductions: a 3x3 conv (16 -> 32 channels), PRelu, an L2 normalisation over the
  channels (ReduceL2 and Div) and a ReduceLogSumExp over them;
- decoder: two stride-2 4x4 ConvTransposes (64 -> 32 -> 16 channels, 28 -> 112) with a
  Relu between.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _model(name: str, nodes: list, x: list[int], y: list[int], weights: dict) -> object:
    from onnx import checker, helper, numpy_helper

    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", 1, x)],
        [helper.make_tensor_value_info("y", 1, y)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    checker.check_model(model)
    return model


def write(folder: Path) -> list[Path]:
    """The three models, as folder/NAME.onnx."""
    import onnx
    from onnx import helper

    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    conv = {"pads": [1, 1, 1, 1]}
    acts = ["HardSwish", "LeakyRelu", "Mish", "Elu"]
    nodes = []
    for i, act in enumerate(acts):
        src = "x" if i == 0 else f"a{i - 1}"
        nodes += [helper.make_node("Conv", [src, f"w{i}"], [f"c{i}"], **conv),
                  helper.make_node(act, [f"c{i}"], ["y" if i == 3 else f"a{i}"])]  # fmt: skip
    models = {
        "activations": _model("activations", nodes, [1, 16, 56, 56], [1, 16, 56, 56],
                              {f"w{i}": w(16, 16, 3, 3) for i in range(4)}),
        "reductions": _model("reductions", [
            helper.make_node("Conv", ["x", "w"], ["c"], **conv),
            helper.make_node("PRelu", ["c", "slope"], ["p"]),
            helper.make_node("ReduceL2", ["p", "axes"], ["n"], keepdims=1),
            helper.make_node("Div", ["p", "n"], ["u"]),
            helper.make_node("ReduceLogSumExp", ["u", "axes"], ["y"], keepdims=1),
        ], [1, 16, 56, 56], [1, 1, 56, 56], {"w": w(32, 16, 3, 3),
            "slope": np.full((32, 1, 1), 0.25, np.float32), "axes": np.array([1])}),
        "decoder": _model("decoder", [
            helper.make_node("ConvTranspose", ["x", "w1"], ["u"], strides=[2, 2], **conv),
            helper.make_node("Relu", ["u"], ["r"]),
            helper.make_node("ConvTranspose", ["r", "w2"], ["y"], strides=[2, 2], **conv),
        ], [1, 64, 28, 28], [1, 16, 112, 112], {"w1": w(64, 32, 4, 4), "w2": w(32, 16, 4, 4)}),
    }  # fmt: skip
    paths = []
    for name, model in models.items():
        paths.append(folder / f"{name}.onnx")
        onnx.save(model, paths[-1])
    return paths
