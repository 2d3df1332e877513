"""relayout: the identity copy, priced by the level its two layouts differ at, and refusing
layout text that does not parse or does not fit, from a program or from a binary."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import infer, operand, run, spec

import mnrt
from mnrt.device import dtypes as dt
from mnrt.device.kernels import TensorSpec, lookup
from mnrt.device.mapping import model_kernel_call

SRC = "((8_L2B:1, 8_L1B:1, 4_MAB:4), (4_MAB:1, 4_PE:1))"  # a (256, 16) tensor
DST = {
    None: SRC,
    "L1BM": "((8_L2B:1, 8_L1B:1, 4_MAB:4), (4_PE:1, 4_MAB:1))",
    "L2BM": "((8_L1B:1, 8_L2B:1, 4_MAB:4), (4_MAB:1, 4_PE:1))",
}
LM_SRC, LM_DST = (
    "((8_L2B:1, 8_L1B:1, 4:2), (4_MAB:1, 2:1))",
    "((8_L2B:1, 8_L1B:1, 4:1), (4_MAB:1, 2:4))",
)


def _time(src, dst, shape=(256, 16)):
    k = lookup("relayout")
    x = TensorSpec(shape, dt.FLOAT)
    return model_kernel_call(mnrt.MNCORE2, k, [x], [x], k.check_attrs({"src": src, "dst": dst}))


def test_price_grows_with_the_level_the_layouts_differ_at():
    same, l1, l2 = (_time(SRC, DST[k]) for k in (None, "L1BM", "L2BM"))
    lm = _time(LM_SRC, LM_DST, (64, 8))
    launch = mnrt.MNCORE2.kernel_launch_s
    assert same.time_s == launch and same.dram_bytes == 0
    lm_per_byte = (lm.time_s - launch) / (64 * 8 * 4)
    l1_per_byte, l2_per_byte = ((m.time_s - launch) / (256 * 16 * 4) for m in (l1, l2))
    assert 0 < lm_per_byte < l1_per_byte < l2_per_byte
    assert (lm.bound, l1.bound, l2.bound) == ("lm", "sram", "l2bm")
    assert l2_per_byte == pytest.approx(1 / mnrt.MNCORE2.l2bm_bandwidth)


@pytest.mark.parametrize("dtype", ["float", "half", "int32", "bool"])
def test_it_copies_bit_for_bit(dtype):
    x = np.random.default_rng(0).standard_normal((256, 16)) * 100
    x = x > 0 if dtype == "bool" else x
    src = operand(x.astype(np.float32) if dtype != "bool" else x, dtype)
    y = run("relayout", src, src=SRC, dst=DST["L2BM"])
    d = src[1]
    np.testing.assert_array_equal(d.to_storage(np.asarray(y, dtype=d.read_dtype)), src[0])


def test_a_layout_that_does_not_cover_the_tensor_is_refused():
    with pytest.raises(mnrt.KernelAttributeError, match="cannot hold x"):
        infer("relayout", spec((512, 16)), src=SRC, dst=SRC)  # covers 256 rows only
    with pytest.raises(mnrt.KernelAttributeError, match="rank 3"):
        infer("relayout", spec((2, 256, 16)), src=SRC, dst=SRC)


@pytest.mark.parametrize(
    "attrs, match",
    [
        ({"src": "((8_Q),)", "dst": SRC}, "unknown unit 'Q'"),
        ({"src": SRC, "dst": "9" * 5000}, "characters"),
        ({"src": SRC, "dst": "((2_PE:1, 2_PE:1),)"}, "same PE"),
        ({"src": SRC}, "needs attribute 'dst'"),
        ({"src": SRC, "dst": 3}, "must be str"),
    ],
)
def test_bad_layout_text_is_refused_when_the_kernel_is_made(attrs, match):
    with pytest.raises(mnrt.KernelAttributeError, match=match):
        mnrt.Kernel("relayout", ["x"], ["y"], attrs)


@pytest.fixture(scope="module")
def relayout_binary(tmp_path_factory):
    """A compiled model whose program holds relayout kernels, as JSON (`convert`'s form)."""
    from mnrt.compiler.models import MODELS
    from mnrt.format import LightBinary, jsonio

    path = tmp_path_factory.mktemp("relayout") / "m.mnlb"
    builder, inputs = MODELS["mlp"]()
    with mnrt.Context() as ctx:
        ctx.compile(builder, inputs, options={"layout_planner": "legacy"}).save_binary(path)
    doc = jsonio.to_json(LightBinary.load(path))
    assert '"relayout"' in json.dumps(doc)
    return doc


def _replace(doc, text):
    """The binary (JSON form) with every relayout's dst attribute replaced by `text`."""
    if isinstance(doc, dict):
        if doc.get("name") == "dst" and doc.get("kind") == "String":
            return {**doc, "s": text}
        return {k: _replace(v, text) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_replace(v, text) for v in doc]
    return doc


def _load_and_replay(doc, folder):
    from mnrt.format import LightBinary, jsonio
    from mnrt.replay.plan import validate

    binary = LightBinary(jsonio.from_json(json.loads(json.dumps(doc))).to_bytes())
    validate(binary)
    path = folder / "h.mnlb"
    binary.save(path)
    return mnrt.replay(path)


HOSTILE = ["((8_Q),)", "((2_PE:1, 2_PE:1),)", "((1,), (1,))", "()", "((0,),)",
           "((99999999999999999999_T,),)", "(" * 3000, "((64_PE:1,), (16:1,))"]  # fmt: skip


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_relayout_attributes_in_a_binary_are_refused(relayout_binary, text, tmp_path):
    hostile = _replace(relayout_binary, text)
    assert json.dumps(text) in json.dumps(hostile)
    with pytest.raises(mnrt.MnrtError, match="relayout"):
        _load_and_replay(hostile, tmp_path)


@settings(max_examples=25, deadline=None)
@given(text=st.text(max_size=60) | st.sampled_from(HOSTILE).map(lambda t: t[::-1]))
def test_any_relayout_text_in_a_binary_is_refused_cleanly_or_replays(
    relayout_binary, text, tmp_path_factory
):
    try:
        result = _load_and_replay(_replace(relayout_binary, text), tmp_path_factory.mktemp("h"))
    except mnrt.MnrtError:
        return
    assert result.passed  # text that parses and fits replays like any other
