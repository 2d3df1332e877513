"""The MPMD IR (text form, verifier), the import step (stage assignment, cost balance,
use-set inference) and the options."""

from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnrt.compiler import GraphBuilder
from mnrt.compiler.models import mlp
from mnrt.compiler.mpmd import (
    MpmdError,
    dump,
    parse,
    parse_assignment,
    parse_mpmd,
    partition,
    run_pipeline,
)
from mnrt.compiler.mpmd.partition import balanced_cuts
from mnrt.errors import InvalidArgumentError

TEXT = """func @f
  input %x: float[2x3] device=0
  param %"w eird": half[3]
  fragment @f0 stage=0 device=0 origin=["layer0"] (%x) -> (%a) {
    %a: float[2x3] = add(%x, %"w eird") {} name="layer0/add"
  }
  transfer @t0 %a -> %a.t device 0 -> 1
  fragment @f1 stage=1 device=1 origin=[] (%a.t) -> (%y) {
    %y: float[2x3] = reshape(%a.t) {'shape': (2, 3)} name="r"
  }
  return %y
"""


def test_text_round_trips_and_verifies():
    program = parse(TEXT)
    program.verify()
    assert dump(program) == TEXT
    assert [f.origin for f in program.fragments] == [("layer0",), ()]
    assert program.transfers[0].src == 0 and program.transfers[0].dst == 1


@pytest.mark.parametrize(
    "bad, match",
    [
        ("func @f\n  bogus line\n", "line 2"),
        ("nothing\n", "starts with 'func @name'"),
        ("func @f\n  input %x: float[2y3] device=0\n", "dtype"),
        ("func @f\n  fragment @a stage=0 device=0 origin=[] () -> () {\n", "not closed"),
    ],
)
def test_text_errors_name_the_line(bad, match):
    with pytest.raises(MpmdError, match=match):
        parse(bad)


@pytest.mark.parametrize(
    "edit, match",
    [
        (("device 0 -> 1", "device 1 -> 0"), "is not on device 1"),
        (("(%a.t) -> (%y)", "(%a) -> (%y)"), "lives on device 0"),
        (("-> (%a) {", "-> () {"), "not defined before it"),
        (("return %y", "return %zz"), "never defined"),
    ],
)
def test_verifier_catches_broken_programs(edit, match):
    with pytest.raises(MpmdError, match=match):
        parse(TEXT.replace(*edit)).verify()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 100.0), min_size=1, max_size=9),
    st.integers(1, 4),
)
def test_balanced_cuts_is_the_best_contiguous_split(costs, parts):
    if len(costs) < parts:
        with pytest.raises(MpmdError):
            balanced_cuts(costs, parts)
        return
    stages = balanced_cuts(costs, parts)
    assert stages == sorted(stages) and set(stages) == set(range(parts))

    def worst(cuts):
        bounds = [0, *cuts, len(costs)]
        return max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds))

    best = min(worst(c) for c in itertools.combinations(range(1, len(costs)), parts - 1))
    got = max(sum(c for c, s in zip(costs, stages) if s == k) for k in range(parts))
    assert got <= best * (1 + 1e-9) + 1e-12


def _named_chain():
    """x -> layer0 (2 nodes) -> unnamed relu -> layer1 (2 nodes) -> unnamed neg -> y."""
    b = GraphBuilder("chain")
    h = b.input("x", (4, 8))
    with b.scope("layer0"):
        h = b.gemm(h, b.param("w0", np.eye(8, dtype=np.float32)))
        h = b.gelu(h)
    h = b.relu(h)
    with b.scope("layer1"):
        h = b.gemm(h, b.param("w1", np.eye(8, dtype=np.float32)))
        h = b.gelu(h)
    b.output(b.neg(h), "y")
    return b.build()


def test_use_sets_infer_the_unassigned_nodes():
    graph = _named_chain()
    opts = parse_mpmd({"devices": [0, 1], "microbatches": 2})
    program = partition(graph, opts, {"layer0": 0, "layer1": 1})
    stages = {n.name: f.stage for f in program.fragments for n in f.nodes}
    # relu feeds only layer1: stage 1; neg reads layer1 and is only returned: stage 1.
    assert stages == {
        "layer0/gemm0": 0,
        "layer0/gelu1": 0,
        "relu2": 1,
        "layer1/gemm3": 1,
        "layer1/gelu4": 1,
        "neg5": 1,
    }
    assert [f.inferred for f in program.fragments] == [False, True, False, True]
    assert len(program.transfers) == 1


def test_assignment_that_goes_backwards_is_refused():
    graph = _named_chain()
    opts = parse_mpmd({"devices": [0, 1]})
    with pytest.raises(MpmdError, match="backwards: node 'layer0/gelu1' is in stage 1"):
        partition(graph, opts, {"layer0/gemm": 0, "layer0/gelu": 1, "layer1": 0})


def test_assignment_errors_name_prefixes_and_stages():
    graph = _named_chain()
    opts = parse_mpmd({"devices": [0, 1]})
    with pytest.raises(MpmdError, match="there are 2 stages"):
        partition(graph, opts, {"layer0": 2})
    with pytest.raises(MpmdError, match="no node name starts with"):
        partition(graph, opts, {"nothing": 0})
    with pytest.raises(MpmdError, match=r"leaves stage\(s\) 1 without nodes"):
        partition(graph, opts, {"layer": 0})


def test_without_assignment_stages_are_balanced_by_modelled_cost():
    builder, _ = mlp()
    opts = parse_mpmd({"devices": [0, 1]})
    program = partition(builder.build(), opts, {})
    assert [f.stage for f in program.fragments] == [0, 1]
    assert [f.device for f in program.fragments] == [0, 1]
    assert all(f.inferred for f in program.fragments)


@pytest.mark.parametrize(
    "value, match",
    [
        ({"devices": [0, 1], "schedule": "1f1b"}, "backward pass"),
        ({"devices": [0, 1], "schedule": "zigzag"}, "unknown"),
        ({"devices": []}, "non-empty list"),
        ({"devices": [0, 0]}, "twice"),
        ({"devices": [0, 1], "stages": 4}, "use 'circular'"),
        ({"devices": [0, 1], "stages": 3, "schedule": "circular"}, "multiple"),
        ({"devices": [0, 1], "microbatches": 0}, "microbatches"),
        ({"devices": [0, 1], "oops": 1}, "unknown key"),
        ("{not json", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_mpmd_option_errors(value, match):
    with pytest.raises(InvalidArgumentError, match=match):
        parse_mpmd(value)


def test_mpmd_options_defaults_and_json_text():
    opts = parse_mpmd('{"devices": [2, 3], "schedule": "circular", "stages": 4}')
    assert (opts.devices, opts.stages, opts.microbatches) == ((2, 3), 4, 2)
    assert opts.virtual_stages == 2 and [opts.device_of(s) for s in range(4)] == [2, 3, 2, 3]
    assert parse_assignment({"a": 1}) == {"a": 1}
    with pytest.raises(InvalidArgumentError):
        parse_assignment({"a": -1})


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_damaged_ir_text_is_refused_with_mpmd_error(data):
    lines = TEXT.splitlines()
    i = data.draw(st.integers(0, len(lines) - 1))
    cut = data.draw(st.integers(0, len(lines[i])))
    junk = data.draw(st.text(alphabet="%@{}()[]'\",:=x0123 abc-\\", max_size=12))
    lines[i] = lines[i][:cut] + junk + lines[i][cut + len(junk) :]
    with contextlib.suppress(MpmdError):  # anything else (a traceback) fails the test
        parse("\n".join(lines)).verify()


@settings(max_examples=10, deadline=None)
@given(st.integers(2, 6), st.integers(1, 3), st.booleans())
def test_the_ir_after_every_pass_round_trips_through_its_text(layers, stages, assign):
    b = GraphBuilder("chain")
    h = b.input("x", (2, 4))
    for i in range(layers):
        with b.scope(f"l{i}"):
            h = b.add(h, b.relu(b.gemm(h, b.param(f"w{i}", np.eye(4, dtype=np.float32)))))
    b.output(b.softmax(h), "y")
    stages = min(stages, layers)
    assignment = {f"l{i}/": i * stages // layers for i in range(layers)} if assign else {}
    opts = parse_mpmd({"devices": list(range(stages)), "microbatches": 1})
    for _, program in run_pipeline(partition(b.build(), opts, assignment)):
        assert dump(parse(dump(program))) == dump(program)
