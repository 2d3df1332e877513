"""ONNX converters of LSTM, GRU and RNN, unrolled over the sequence: each direction, both
layouts, the optional inputs, against ONNX's reference evaluator; sequence_lens, activations
with alpha and beta, clip and input_forget, which that reference ignores, against
onnxruntime (run on the layout-0 twin of a layout-1 model, which it does not take)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper
from onnx_one_node import check, run

from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError

RNG = np.random.default_rng(20)
SEQ, BATCH, SIZE, HIDDEN = 4, 3, 5, 4
INPUTS = {
    "LSTM": ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"],
    "GRU": ["X", "W", "R", "B", "sequence_lens", "initial_h"],
    "RNN": ["X", "W", "R", "B", "sequence_lens", "initial_h"],
}
OUTPUTS = {"LSTM": ["Y", "Y_h", "Y_c"], "GRU": ["Y", "Y_h"], "RNN": ["Y", "Y_h"]}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
TIME_FIRST = ("X", "initial_h", "initial_c")  # the inputs whose first two axes layout swaps

# Every activation the spec lists, with alpha and beta taken in order by the activations
# that use them (LSTM: HardSigmoid 0.3 and 0.6, ScaledTanh 1.5 and 0.5, LeakyRelu 0.2).
FORWARD_ACTIVATIONS = {
    "LSTM": dict(activations=["HardSigmoid", "ScaledTanh", "LeakyRelu"],
                 activation_alpha=[0.3, 1.5, 0.2], activation_beta=[0.6, 0.5]),
    "GRU": dict(activations=["Sigmoid", "Softplus"]),
    "RNN": dict(activations=["Relu"]),
}  # fmt: skip
# A bidirectional op's reverse direction's, listed after the forward direction's.
REVERSE_ACTIVATIONS = {
    "LSTM": dict(activations=["Sigmoid", "Softsign", "Elu"], activation_alpha=[0.7]),
    "GRU": dict(activations=["HardSigmoid", "Affine"], activation_alpha=[0.25, 0.5],
                activation_beta=[0.4, 0.1]),
    "RNN": dict(activations=["ThresholdedRelu"], activation_alpha=[0.1]),
}  # fmt: skip


def _normal(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.7).astype(np.float32)


def _arrays(op: str, direction: str, layout: int, extras: bool) -> dict[str, np.ndarray]:
    """X, W and R; with `extras` also B, the initial states and LSTM's peepholes."""
    dirs = 2 if direction == "bidirectional" else 1
    n = GATES[op] * HIDDEN
    time_first = (SEQ, BATCH) if not layout else (BATCH, SEQ)
    arrays = {"X": _normal(*time_first, SIZE), "W": _normal(dirs, n, SIZE),
              "R": _normal(dirs, n, HIDDEN)}  # fmt: skip
    if extras:
        state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
        arrays |= {"B": _normal(dirs, 2 * n), "initial_h": _normal(*state)}
        if op == "LSTM":
            arrays |= {"initial_c": _normal(*state), "P": _normal(dirs, 3 * HIDDEN)}
    return arrays


def _model(op: str, feeds: dict, inits: dict, outputs: list[str] | None = None, **attrs):
    """One recurrent node reading graph inputs `feeds` and initializers `inits`; an input in
    neither is left out (an empty name, or none at the end)."""
    given = {**feeds, **inits}
    names = INPUTS[op]
    last = max(i for i, n in enumerate(names) if n in given)
    ins = [n if n in given else "" for n in names[: last + 1]]
    outputs = OUTPUTS[op] if outputs is None else outputs
    node = helper.make_node(op, ins, outputs, hidden_size=HIDDEN, **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in feeds.items()]  # fmt: skip
    graph = helper.make_graph(
        [node], "t", vis, [helper.make_empty_tensor_value_info(n) for n in outputs if n],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    return model


def _onnxruntime(op: str, feeds: dict, inits: dict, layout: int, **attrs) -> list[np.ndarray]:
    """onnxruntime's outputs; a layout-1 case runs as its layout-0 twin."""
    ort = pytest.importorskip("onnxruntime")

    def time_major(arrays: dict) -> dict:
        return {n: np.swapaxes(a, 0, 1) if layout and n in TIME_FIRST else a
                for n, a in arrays.items()}  # fmt: skip

    feeds, inits = time_major(feeds), time_major(inits)
    model = _model(op, feeds, inits, **attrs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    if layout:
        outs = [np.transpose(outs[0], (2, 0, 1, 3))] + [np.swapaxes(s, 0, 1) for s in outs[1:]]
    return outs


def _compare(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("extras", [False, True], ids=["bare", "bias-initial-peepholes"])
def test_matches_the_reference(ctx, op, direction, layout, extras):
    """Bare cases read W and R as graph inputs; the others read them, B and P as
    initializers (the torch export's form) and the initial states as graph inputs."""
    arrays = _arrays(op, direction, layout, extras)
    weights = ("W", "R", "B", "P") if extras else ()
    feeds = {n: a for n, a in arrays.items() if n not in weights}
    inits = {n: a for n, a in arrays.items() if n in weights}
    check(ctx, _model(op, feeds, inits, direction=direction, layout=layout), feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("extras", [False, True], ids=["bare", "bias-initial"])
def test_gru_linear_before_reset_matches_the_reference(ctx, direction, layout, extras):
    feeds = _arrays("GRU", direction, layout, extras)
    model = _model("GRU", feeds, {}, direction=direction, layout=layout, linear_before_reset=1)
    check(ctx, model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_ragged_lengths_as_an_input_keep_the_state_and_zero_y(ctx, op, direction, layout):
    """One compile, run with two sets of lengths: the mask is computed on the device. A
    length of 0 gives zero final states, as onnxruntime does."""
    feeds = _arrays(op, direction, layout, extras=True)
    first, second = np.array([2, SEQ, 1], np.int32), np.array([SEQ, 3, 0], np.int32)
    attrs = dict(direction=direction, layout=layout)
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    model = _model(op, {**feeds, "sequence_lens": first}, {}, **attrs)
    compiled = ctx.compile(model, {**feeds, "sequence_lens": first},
                           options={"float_dtype": "float"})  # fmt: skip
    assert "sequence_lens" in compiled.input_names
    for lens in (first, second):
        got = compiled({**feeds, "sequence_lens": lens})
        outs = [got[n].cpu() for n in OUTPUTS[op]]
        _compare(outs, _onnxruntime(op, {**feeds, "sequence_lens": lens}, {}, **attrs))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_activations_clip_and_constant_lengths_match_onnxruntime(ctx, op, direction, layout):
    """Non-default activations (each direction its own when bidirectional), clip, constant
    ragged lengths, and LSTM's input_forget."""
    feeds = _arrays(op, direction, layout, extras=True)
    acts = dict(FORWARD_ACTIVATIONS[op])
    if direction == "bidirectional":
        for name, values in REVERSE_ACTIVATIONS[op].items():
            acts[name] = acts.get(name, []) + values
    attrs = dict(direction=direction, layout=layout, clip=0.9, **acts)
    if op == "LSTM":
        attrs["input_forget"] = 1
    inits = {"sequence_lens": np.array([3, SEQ, 1], np.int32)}
    got = run(ctx, _model(op, feeds, inits, **attrs), feeds)
    _compare(got, _onnxruntime(op, feeds, inits, **attrs))


def test_one_direction_rnn_takes_the_first_of_two_activations(ctx):
    """Opset 1's RNN listed two activations by default; onnxruntime uses the first."""
    feeds = _arrays("RNN", "forward", 0, extras=True)
    attrs = dict(activations=["Relu", "Tanh"])
    _compare(run(ctx, _model("RNN", feeds, {}, **attrs), feeds),
             _onnxruntime("RNN", feeds, {}, 0, **attrs))  # fmt: skip


def test_only_the_final_state_asked_for_and_a_one_step_sequence(ctx):
    """Y left out (an empty name), as torch exports a layer whose output is its state."""
    feeds = _arrays("LSTM", "bidirectional", 0, extras=True)
    feeds["X"] = feeds["X"][:1]
    check(ctx, _model("LSTM", feeds, {}, ["", "Y_h"], direction="bidirectional"), feeds)


def test_stacked_lstm_and_gru_as_torch_exports_them(ctx):
    """Batch-first input transposed to time-major, a two-layer bidirectional LSTM (the
    second reading the first's Y, its directions merged) and a GRU with
    linear_before_reset, as torch.onnx.export writes nn.LSTM and nn.GRU."""
    ort = pytest.importorskip("onnxruntime")
    h2 = 2 * HIDDEN
    inits = {
        "W1": _normal(2, 4 * HIDDEN, SIZE), "R1": _normal(2, 4 * HIDDEN, HIDDEN),
        "B1": _normal(2, 8 * HIDDEN), "W2": _normal(2, 4 * HIDDEN, h2),
        "R2": _normal(2, 4 * HIDDEN, HIDDEN), "B2": _normal(2, 8 * HIDDEN),
        "W3": _normal(1, 3 * HIDDEN, h2), "R3": _normal(1, 3 * HIDDEN, HIDDEN),
        "B3": _normal(1, 6 * HIDDEN), "shape": np.array([SEQ, BATCH, h2], np.int64),
    }  # fmt: skip
    lstm = dict(hidden_size=HIDDEN, direction="bidirectional")
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["xt", "W1", "R1", "B1"], ["y1"], **lstm),
        helper.make_node("Transpose", ["y1"], ["y1t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["y1t", "shape"], ["x2"]),
        helper.make_node("LSTM", ["x2", "W2", "R2", "B2"], ["y2", "h2", "c2"], **lstm),
        helper.make_node("Transpose", ["y2"], ["y2t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["y2t", "shape"], ["x3"]),
        helper.make_node("GRU", ["x3", "W3", "R3", "B3"], ["", "h3"], hidden_size=HIDDEN,
                         linear_before_reset=1),
    ]  # fmt: skip
    x = _normal(BATCH, SEQ, SIZE)
    graph = helper.make_graph(
        nodes, "torch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_empty_tensor_value_info(n) for n in ("h2", "c2", "h3")],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _compare(run(ctx, model, {"x": x}), sess.run(None, {"x": x}))


@pytest.mark.parametrize(
    ("attrs", "error", "match"),
    [
        (dict(activations=["ThresholdedRelu"]), UnsupportedModelError,
         "ThresholdedRelu without its activation_alpha"),
        (dict(activations=["Relu"], activation_alpha=[0.5]), UnsupportedModelError,
         "left over"),
        (dict(activations=["Gelu"]), UnsupportedModelError, "activation Gelu"),
        (dict(activations=["Relu", "Relu", "Relu"]), InvalidModelError, "3 names"),
    ],
)  # fmt: skip
def test_activations_it_cannot_honour_are_refused(ctx, attrs, error, match):
    feeds = _arrays("RNN", "forward", 0, extras=False)
    with pytest.raises(error, match=match):
        run(ctx, _model("RNN", feeds, {}, **attrs), feeds)


def test_wrong_shapes_and_lengths_are_invalid(ctx):
    feeds = _arrays("GRU", "forward", 0, extras=False)
    feeds["R"] = feeds["R"][:, :, :3]  # hidden_size 4, R for 3
    with pytest.raises(InvalidModelError, match="hidden_size=4"):
        run(ctx, _model("GRU", feeds, {}), feeds)
    feeds = _arrays("RNN", "forward", 0, extras=False)
    inits = {"sequence_lens": np.array([SEQ + 1, 1, 1], np.int32)}
    with pytest.raises(InvalidModelError, match="sequence_lens"):
        run(ctx, _model("RNN", feeds, inits), feeds)


@pytest.mark.parametrize(
    "attrs",
    [
        {"input_forget": 1},  # 1 - i at every step
        {
            "activations": ["Sigmoid", "Affine", "Tanh"],
            "activation_alpha": [0.5],
            "activation_beta": [0.1],
        },
    ],
)
def test_an_unrolled_ops_constants_are_made_once_not_per_step(ctx, attrs):
    """A parameter per step was a buffer and a write per step in the binary."""
    counts = []
    for seq in (2, 6):
        w, r = _normal(1, 4 * HIDDEN, SIZE), _normal(1, 4 * HIDDEN, HIDDEN)
        node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=HIDDEN, **attrs)
        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, BATCH, SIZE])
        y = helper.make_empty_tensor_value_info("Y")
        inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")]
        model = helper.make_model(helper.make_graph([node], "g", [x], [y], inits),
                                  opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
        compiled = ctx.compile(
            model, {"X": _normal(seq, BATCH, SIZE)}, options={"float_dtype": "float"}
        )
        counts.append(sum(v.role == "param" for v in compiled.graph.values.values()))
    assert counts[0] == counts[1] <= 4, counts
