"""layout_spec / gemm_layout_spec (MN-Core layout notation) and sram_budget (on-chip
placement): parsing and device checks, what the compiler records, and report.json."""

from __future__ import annotations

import itertools
import json
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import layout as L
from mnrt.compiler.models import MODELS
from mnrt.compiler.options import OptionError, resolve
from mnrt.compiler.placement import ON_CHIP, on_chip_bytes

# Layouts from PFN's public MN-Core material, with the shapes they describe.
PUBLISHED = [
    ("((8_L2B:1, 4:2, 8_L1B:1), (2:1, 4_PE:1, 2_W:1))", (256, 16), 8),
    ("((8_L2B:1, 4:2, 8_L1B:1), (2:1, 4_PE:1, 2_W:1); B@[MAB])", (256, 16), 8),
    ("((4:2,), (2:1, 4_PE:1, 2_W:1))", (4, 16), 8),
    (
        "((2_L2B:1, 16_MAB, 4:64), (2_L1B:4, 4_PE, 2_W, 8:1), (4_L2B:2, 4_L1B:1, 8:8))",
        (128, 128, 128),
        256,
    ),
]


@pytest.mark.parametrize(("text", "shape", "long_words"), PUBLISHED)
def test_published_layouts_parse_and_print_back(text, shape, long_words):
    layout = L.parse(text)
    assert layout.shape == shape and layout.long_words_per_pe() == long_words
    assert str(layout) == text and L.parse(str(layout)) == layout
    assert L.fit(layout, shape) is None
    assert "covers" in L.fit(layout, (shape[0] * 2, *shape[1:]))
    assert "rank" in L.fit(layout, (*shape, 1))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8_L2B:1", "parenthesised list of axes"),
        ("((8_L2B:1) (4:1))", "separated by commas"),
        ("((8_XYZ),)", "unknown unit 'XYZ'"),
        ("((9_L2B),)", "reaches L2B index 8, but there are 8 on the chip"),
        ("((2_PE:1, 2_PE:2, 2_PE:1),)", "reaches PE index 4"),
        ("((4_L2B:1, 2_L2B:2),)", "same L2B"),
        ("((4:1, 2:2),)", "share a local-memory address"),
        ("((4096:1), (8:4096))", "bytes of local memory per PE, more than its 32768"),
        ("((8_MAB:1); B@[MAB])", "both split over and broadcast"),
        ("((8_MAB:1); B@[Q])", "unknown unit 'Q'"),
        ("((8_MAB:1); MAB)", "expected B@[UNIT"),
        ("((8_L2B:0),)", "count and stride >= 1"),
        ("((x),)", "is not N, N:STRIDE"),
        ("(((),)", "separated by commas"),
    ],
)
def test_bad_layouts_say_what_is_wrong(text, message):
    with pytest.raises(L.LayoutError, match=message.replace("(", r"\(").replace("[", r"\[")):
        L.parse(text)


def test_a_hostile_layout_is_refused_without_enumerating_it():
    # 2**60 index combinations over 61 addresses: two must collide, found without listing.
    start = time.perf_counter()
    with pytest.raises(L.LayoutError, match="share a local-memory address"):
        L.parse("((" + ", ".join(["2:1"] * 60) + "),)")
    assert time.perf_counter() - start < 1.0


_UNITS = ["L2B", "L1B", "MAB", "PE", "W", None]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(1, 4), st.sampled_from(_UNITS), st.none() | st.integers(1, 9)),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_parse_accepts_exactly_the_layouts_that_fit_the_device(axes):
    text = "(" + ", ".join(
        "(" + ", ".join(f"{c}{'_' + u if u else ''}{':' + str(s) if s else ''}" for c, u, s in a)
        + ",)" for a in axes
    ) + ")"  # fmt: skip
    layout = L.Layout(tuple(tuple(L.Factor(c, u, s) for c, u, s in a) for a in axes))
    counts = L.unit_counts(mnrt.MNCORE2)
    ok = True
    for kind in _UNITS:
        pairs = layout.strides(kind)
        offsets = [sum(i * s for i, (_, s) in zip(idx, pairs))
                   for idx in itertools.product(*(range(c) for c, _ in pairs))]  # fmt: skip
        limit = counts[kind][0] if kind else math.inf
        ok &= len(set(offsets)) == len(offsets) and max(offsets, default=0) < limit
    try:
        parsed = L.parse(text)
    except L.LayoutError:
        assert not ok
    else:
        assert ok and parsed == layout and L.parse(str(parsed)) == parsed


def test_bad_layout_options_are_option_errors():
    with pytest.raises(OptionError, match="option layout_spec .* unknown unit 'Q'"):
        resolve({"layout_spec": "((8_Q),)"})
    with pytest.raises(OptionError, match="option gemm_layout_spec .* same PE"):
        resolve({"gemm_layout_spec": "((2_PE:1, 2_PE:1),)"})


ACTIVATION = "((8_L2B:1, 8_L1B:1), (16_MAB:1, 4_PE:1, 2_W:1))"  # [64, 128]
WEIGHT = "((8_L2B:1, 16:1), (16_MAB:1, 4_PE:1, 2_W:1))"  # [128, 128]


@pytest.fixture
def ctx():
    with mnrt.Context() as c:
        yield c


def _compile(ctx, tmp_path, **options):
    builder, inputs = MODELS["transformer"]()  # seq 64, dim 128
    cg = tmp_path / "cg"
    compiled = ctx.compile(builder, inputs, codegen_dir=cg, options=options)
    return compiled, json.loads((cg / "report.json").read_text()), (cg / "l3ir.txt").read_text()


def test_layout_specs_go_to_the_values_they_describe(ctx, tmp_path):
    compiled, report, l3ir = _compile(
        ctx, tmp_path, layout_spec=ACTIVATION, gemm_layout_spec=WEIGHT
    )
    values = compiled.graph.values
    act = [n for n, v in values.items() if v.layout == ACTIVATION]
    weights = [n for n, v in values.items() if v.layout == WEIGHT]
    assert act and all(values[n].shape == (64, 128) and values[n].role != "param" for n in act)
    assert weights and all(values[n].shape == (128, 128) for n in weights)
    assert f"layout={ACTIVATION}" in l3ir and f"layout={WEIGHT}" in l3ir
    lay = report["layout"]
    assert lay["values_per_layout"][ACTIVATION] == len(act)
    assert lay["unfitted_count"] > 0  # e.g. the [4, 64, 64] attention scores
    assert all(u["why"] and u["option"] in ("layout_spec", "gemm_layout_spec")
               for u in lay["unfitted"])  # fmt: skip
    # What is recorded changes no result: the kernels work on dense arrays either way.
    assert mnrt.replay(tmp_path / "cg" / "model.mnlb").passed


def test_sram_budget_places_temporaries_on_chip_within_it(ctx, tmp_path):
    compiled, report, l3ir = _compile(ctx, tmp_path)
    whole = report["memory"]["on_chip"]
    assert whole["budget_bytes"] == on_chip_bytes() and whole["spilled_values"] == 0
    assert f"@{ON_CHIP}" in l3ir
    graph = compiled.graph
    for n in (*graph.inputs, *graph.outputs, *graph.params):
        assert graph.values[n].location == "dram"

    budget = whole["peak_on_chip_bytes"] // 3
    _, report, _ = _compile(ctx, tmp_path, sram_budget=budget)
    part = report["memory"]["on_chip"]
    assert part["budget_bytes"] == budget and 0 < part["peak_on_chip_bytes"] <= budget
    assert part["on_chip_values"] > 0 and part["spilled_values"] > 0

    compiled, report, l3ir = _compile(ctx, tmp_path, sram_budget=1)
    assert report["memory"]["on_chip"]["on_chip_values"] == 0 and "@lm" not in l3ir
    assert all(v.location == "dram" for v in compiled.graph.values.values())
    assert report["memory"]["on_chip"]["peak_on_chip_bytes"] == 0
