"""Each MPMD pass on a small program in the IR's text form: the text before, the pass, the
text after (the Shardy lit-test shape). Every registered pass must have its case here."""

from __future__ import annotations

import pytest

from mnrt.compiler import mpmd
from mnrt.compiler.mpmd import MpmdError, dump, parse, run_pass

CASES: dict[str, tuple[str, str]] = {}

CASES["absorb-inferred-fragments"] = (
    """func @f
  input %x: float[4] device=0
  fragment @a stage=0 device=0 origin=[] (%x) -> (%a1) {
    %a1: float[4] = relu(%x) {} name="a"
  }
  fragment @u stage=0 device=0 origin=["layer0"] (%a1) -> (%u1) {
    %u1: float[4] = neg(%a1) {} name="layer0/n"
  }
  fragment @c stage=0 device=0 origin=[] (%u1) -> (%c1) {
    %c1: float[4] = exp(%u1) {} name="c"
  }
  transfer @t %c1 -> %c1.t device 0 -> 1
  fragment @v stage=1 device=1 origin=["layer1"] (%c1.t) -> (%y) {
    %y: float[4] = relu(%c1.t) {} name="layer1/r"
  }
  return %y
""",
    """func @f
  input %x: float[4] device=0
  fragment @u stage=0 device=0 origin=["layer0"] (%x) -> (%c1) {
    %a1: float[4] = relu(%x) {} name="a"
    %u1: float[4] = neg(%a1) {} name="layer0/n"
    %c1: float[4] = exp(%u1) {} name="c"
  }
  transfer @t %c1 -> %c1.t device 0 -> 1
  fragment @v stage=1 device=1 origin=["layer1"] (%c1.t) -> (%y) {
    %y: float[4] = relu(%c1.t) {} name="layer1/r"
  }
  return %y
""",
)

CASES["merge-inferred-fragments"] = (
    """func @f
  input %x: float[4] device=0
  fragment @p stage=0 device=0 origin=[] (%x) -> (%p1) {
    %p1: float[4] = relu(%x) {} name="p"
  }
  fragment @q stage=0 device=0 origin=[] (%p1) -> (%q1) {
    %q1: float[4] = neg(%p1) {} name="q"
  }
  fragment @s stage=0 device=0 origin=[] (%x) -> (%s1) {
    %s1: float[4] = exp(%x) {} name="s"
  }
  return %q1, %s1
""",
    """func @f
  input %x: float[4] device=0
  fragment @p stage=0 device=0 origin=[] (%x) -> (%q1, %s1) {
    %p1: float[4] = relu(%x) {} name="p"
    %q1: float[4] = neg(%p1) {} name="q"
    %s1: float[4] = exp(%x) {} name="s"
  }
  return %q1, %s1
""",
)

CASES["merge-user-fragments-into-scheduling-units"] = (
    """func @f
  input %x: float[4] device=0
  fragment @l0 stage=0 device=0 origin=["layer0"] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="layer0/r"
  }
  fragment @l1 stage=0 device=0 origin=["layer1"] (%a) -> (%b) {
    %b: float[4] = neg(%a) {} name="layer1/n"
  }
  transfer @t %b -> %b.t device 0 -> 1
  fragment @l2 stage=1 device=1 origin=["layer2"] (%b.t) -> (%y) {
    %y: float[4] = exp(%b.t) {} name="layer2/e"
  }
  return %y
""",
    """func @f
  input %x: float[4] device=0
  fragment @l0 stage=0 device=0 origin=["layer0", "layer1"] (%x) -> (%b) {
    %a: float[4] = relu(%x) {} name="layer0/r"
    %b: float[4] = neg(%a) {} name="layer1/n"
  }
  transfer @t %b -> %b.t device 0 -> 1
  fragment @l2 stage=1 device=1 origin=["layer2"] (%b.t) -> (%y) {
    %y: float[4] = exp(%b.t) {} name="layer2/e"
  }
  return %y
""",
)

CASES["fragment-dce"] = (
    """func @f
  input %x: float[4] device=0
  input %z: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x, %z) -> (%a, %dead) {
    %a: float[4] = relu(%x) {} name="a"
    %dead: float[4] = neg(%x) {} name="dead"
  }
  transfer @t %a -> %a.t device 0 -> 1
  fragment @g stage=1 device=0 origin=[] (%a) -> (%g1) {
    %g1: float[4] = exp(%a) {} name="g"
  }
  return %a
""",
    """func @f
  input %x: float[4] device=0
  input %z: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="a"
  }
  return %a
""",
)

CASES["fragment-dedup"] = (
    """func @f
  input %x: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x, %x) -> (%a, %a, %x) {
    %a: float[4] = add(%x, %x) {} name="a"
  }
  return %a
""",
    """func @f
  input %x: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a) {
    %a: float[4] = add(%x, %x) {} name="a"
  }
  return %a
""",
)

CASES["copy-constants"] = (
    """func @f
  input %x: float[4] device=0
  param %w: float[4]
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a, %c) {
    %c: float[4] = neg(%w) {} name="c"
    %a: float[4] = add(%x, %c) {} name="a"
  }
  transfer @t0 %a -> %a.t device 0 -> 1
  transfer @t1 %c -> %c.t device 0 -> 1
  fragment @g stage=1 device=1 origin=[] (%a.t, %c.t) -> (%y) {
    %y: float[4] = mul(%a.t, %c.t) {} name="y"
  }
  return %y
""",
    """func @f
  input %x: float[4] device=0
  param %w: float[4]
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a, %c) {
    %c: float[4] = neg(%w) {} name="c"
    %a: float[4] = add(%x, %c) {} name="a"
  }
  transfer @t0 %a -> %a.t device 0 -> 1
  transfer @t1 %c -> %c.t device 0 -> 1
  fragment @g stage=1 device=1 origin=[] (%a.t) -> (%y) {
    %c.g.0: float[4] = neg(%w) {} name="c"
    %y: float[4] = mul(%a.t, %c.g.0) {} name="y"
  }
  return %y
""",
)

CASES["move-transfers-to-producer"] = (
    """func @f
  input %x: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="a"
  }
  fragment @g stage=0 device=0 origin=[] (%a) -> (%b) {
    %b: float[4] = neg(%a) {} name="b"
  }
  transfer @t0 %a -> %a.t device 0 -> 1
  transfer @t1 %x -> %x.t device 0 -> 1
  fragment @h stage=1 device=1 origin=[] (%a.t, %x.t) -> (%y) {
    %y: float[4] = add(%a.t, %x.t) {} name="y"
  }
  return %b, %y
""",
    """func @f
  input %x: float[4] device=0
  transfer @t1 %x -> %x.t device 0 -> 1
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="a"
  }
  transfer @t0 %a -> %a.t device 0 -> 1
  fragment @g stage=0 device=0 origin=[] (%a) -> (%b) {
    %b: float[4] = neg(%a) {} name="b"
  }
  fragment @h stage=1 device=1 origin=[] (%a.t, %x.t) -> (%y) {
    %y: float[4] = add(%a.t, %x.t) {} name="y"
  }
  return %b, %y
""",
)

CASES["merge-transfers"] = (
    """func @f
  input %x: float[2x2] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a, %b) {
    %a: float[2x2] = relu(%x) {} name="a"
    %b: float[2x2] = neg(%x) {} name="b"
  }
  transfer @t0 %a -> %a.t device 0 -> 1
  transfer @t1 %b -> %b.t device 0 -> 1
  fragment @g stage=1 device=1 origin=[] (%a.t, %b.t) -> (%y) {
    %y: float[2x2] = add(%a.t, %b.t) {} name="y"
  }
  return %y
""",
    """func @f
  input %x: float[2x2] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%packed.0) {
    %a: float[2x2] = relu(%x) {} name="a"
    %b: float[2x2] = neg(%x) {} name="b"
    %a.flat.0: float[4] = reshape(%a) {'shape': (4,)} name="a.flat.0"
    %b.flat.0: float[4] = reshape(%b) {'shape': (4,)} name="b.flat.0"
    %packed.0: float[8] = concat(%a.flat.0, %b.flat.0) {'axis': 0} name="packed.0"
  }
  transfer @t2 %packed.0 -> %packed.0.to1.0 device 0 -> 1
  fragment @g stage=1 device=1 origin=[] (%packed.0.to1.0) -> (%y) {
    %a.t.part.0: float[4] = slice(%packed.0.to1.0) {'starts': (0,), 'ends': (4,)} name="a.t.part.0"
    %a.t.0: float[2x2] = reshape(%a.t.part.0) {'shape': (2, 2)} name="a.t.0"
    %b.t.part.0: float[4] = slice(%packed.0.to1.0) {'starts': (4,), 'ends': (8,)} name="b.t.part.0"
    %b.t.0: float[2x2] = reshape(%b.t.part.0) {'shape': (2, 2)} name="b.t.0"
    %y: float[2x2] = add(%a.t.0, %b.t.0) {} name="y"
  }
  return %y
""",
)

CASES["remove-transfer-cycles"] = (
    """func @f
  input %x: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="a"
  }
  transfer @t0 %a -> %a1 device 0 -> 1
  transfer @t1 %a1 -> %a2 device 1 -> 2
  transfer @t2 %a2 -> %a0 device 2 -> 0
  transfer @t3 %a0 -> %a1b device 0 -> 1
  fragment @g stage=1 device=1 origin=[] (%a1b) -> (%g1) {
    %g1: float[4] = neg(%a1b) {} name="g"
  }
  fragment @k stage=2 device=0 origin=[] (%a0, %x) -> (%k1) {
    %k1: float[4] = add(%a0, %x) {} name="k"
  }
  return %g1, %k1
""",
    """func @f
  input %x: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="a"
  }
  transfer @t0 %a -> %a1 device 0 -> 1
  transfer @t1 %a1 -> %a2 device 1 -> 2
  fragment @g stage=1 device=1 origin=[] (%a1) -> (%g1) {
    %g1: float[4] = neg(%a1) {} name="g"
  }
  fragment @k stage=2 device=0 origin=[] (%a, %x) -> (%k1) {
    %k1: float[4] = add(%a, %x) {} name="k"
  }
  return %g1, %k1
""",
)

CASES["uniquify-function-inputs-outputs"] = (
    """func @f
  input %x: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="a"
  }
  return %a, %a, %x
""",
    """func @f
  input %x: float[4] device=0
  fragment @f stage=0 device=0 origin=[] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="a"
  }
  fragment @unique0 stage=0 device=0 origin=[] (%a) -> (%a.out.0) {
    %a.out.0: float[4] = copy(%a) {} name="a.out.0"
  }
  fragment @unique1 stage=0 device=0 origin=[] (%x) -> (%x.out.0) {
    %x.out.0: float[4] = copy(%x) {} name="x.out.0"
  }
  return %a, %a.out.0, %x.out.0
""",
)

# verify-stage-merging: a stage that is one fragment passes unchanged.
CASES["verify-stage-merging"] = (CASES["merge-user-fragments-into-scheduling-units"][1],) * 2


@pytest.mark.parametrize("name", sorted(mpmd.PASSES))
def test_pass_before_after(name):
    assert name in CASES, f"pass {name} has no before/after case"
    before, after = CASES[name]
    program = parse(before)
    program.verify()
    assert dump(run_pass(name, program)) == after
    assert dump(program) == dump(parse(before)), "a pass changed its input program"


def test_verify_stage_merging_names_both_fragments_of_a_split_stage():
    # Stage 0 on device 0 is @l0 and @l2, with stage 1's @l1 between them, fed by @l0 and
    # feeding @l2: no merge can join them.
    text = """
func @f
  input %x: float[4] device=0
  fragment @l0 stage=0 device=0 origin=["a"] (%x) -> (%a) {
    %a: float[4] = relu(%x) {} name="a/r"
  }
  transfer @t0 %a -> %a.t device 0 -> 1
  fragment @l1 stage=1 device=1 origin=["b"] (%a.t) -> (%b) {
    %b: float[4] = neg(%a.t) {} name="b/n"
  }
  transfer @t1 %b -> %b.t device 1 -> 0
  fragment @l2 stage=0 device=0 origin=["c"] (%b.t) -> (%y) {
    %y: float[4] = exp(%b.t) {} name="c/e"
  }
  return %y
"""
    program = run_pass("merge-user-fragments-into-scheduling-units", parse(text))
    assert len(program.fragments) == 3  # the merge would make a cycle: not made
    with pytest.raises(MpmdError, match=r"stage 0 on device 0 is two fragments, @l0 .* @l2"):
        run_pass("verify-stage-merging", program)


def test_unknown_pass_lists_the_passes():
    with pytest.raises(MpmdError, match="fragment-dce"):
        run_pass("no-such-pass", parse(CASES["fragment-dce"][0]))


def test_pipeline_names_only_registered_passes():
    assert set(mpmd.PIPELINE) <= set(mpmd.PASSES)
