"""The modelled multi-device timeline (`mnrt.host.timeline`): dependencies, queues, the link,
folding onto a placement, and the pipeline bubbles it must reproduce analytically."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.device.spec import MNCORE2, MiB
from mnrt.host.timeline import COMPUTE_KINDS, Span, fold, schedule

KINDS = ("program", "trace", "write", "read", "copy", "record_event", "wait_event")
EPS = 1e-12


@st.composite
def workloads(draw, max_devices: int = 8):
    """Spans in enqueue order on up to `max_devices` devices and two queues each, every
    `after` naming spans enqueued earlier (so the set can always be scheduled); copies
    priced by the spec for their ends."""
    n = draw(st.integers(1, 24))
    devices = draw(st.integers(1, max_devices))
    spans = []
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        device = draw(st.integers(0, devices - 1))
        duration = 0.0 if kind.endswith("event") else draw(st.floats(0, 1e-3))
        link, nbytes = None, 0
        if kind == "copy":
            other = draw(st.integers(0, devices - 1))
            nbytes = draw(st.integers(0, 4 * MiB))
            link = draw(st.sampled_from([(device, other), (other, device)]))
            duration = MNCORE2.copy_cost(*link, nbytes).time_s
            link = None if other == device else link
        earlier = [s.key for s in spans]
        after = draw(st.lists(st.sampled_from(earlier), max_size=3, unique=True)) if earlier else []
        spans.append(
            Span(
                key=10_000 - 3 * i,  # keys need not follow enqueue order
                device=device,
                queue=draw(st.integers(0, 1)),
                kind=kind,
                name=f"{kind} {i}",
                duration_s=duration,
                energy_j=draw(st.floats(0, 1e-3)),
                after=tuple(after),
                link=link,
                nbytes=nbytes,
            )
        )
    return spans


def _predecessors(spans):
    """Key -> the keys a span must follow: its `after` and its queue predecessor."""
    last, before = {}, {}
    for s in spans:
        prev = last.get((s.device, s.queue))
        before[s.key] = set(s.after) | ({prev} if prev is not None else set())
        last[(s.device, s.queue)] = s.key
    return before


def _resources(s):
    if s.kind in COMPUTE_KINDS:
        return {("compute", s.device)}
    if s.link:
        return set(MNCORE2.link.route(*s.link))
    if s.kind in ("write", "read"):
        return set(MNCORE2.link.host_route(s.device, to_device=s.kind == "write"))
    return set()


def _overlap(tl, a, b):
    return min(tl.end_s[a.key], tl.end_s[b.key]) - max(tl.start_s[a.key], tl.start_s[b.key]) > EPS


@given(workloads())
@settings(max_examples=150, deadline=None)
def test_a_schedule_respects_queues_dependencies_and_shared_resources(spans):
    tl = schedule(spans, MNCORE2)
    before = _predecessors(spans)
    for s in spans:
        assert tl.start_s[s.key] >= 0
        assert tl.end_s[s.key] == pytest.approx(tl.start_s[s.key] + s.duration_s)
        for k in before[s.key]:
            assert tl.start_s[s.key] >= tl.end_s[k] - EPS, (s, k)
    for a, b in itertools.combinations(spans, 2):
        one_queue = (a.device, a.queue) == (b.device, b.queue)
        if one_queue or _resources(a) & _resources(b):
            assert not _overlap(tl, a, b), (a, b)
    # Nothing waits without a reason: each span starts at 0, when a span it follows
    # ended, or when a span holding one of its resources let go.
    for s in spans:
        reasons = {0.0} | {tl.end_s[k] for k in before[s.key]}
        reasons |= {tl.end_s[o.key] for o in spans if _resources(o) & _resources(s)}
        assert min(abs(tl.start_s[s.key] - r) for r in reasons) < 1e-9


@given(workloads())
@settings(max_examples=100, deadline=None)
def test_busy_time_energy_and_bubble_add_up(spans):
    tl = schedule(spans)
    assert tl.makespan_s == pytest.approx(max(tl.end_s.values()))
    idle = sum(d.idle_energy_j for d in tl.devices)
    assert tl.energy_j == pytest.approx(sum(s.energy_j for s in spans) + idle)
    assert [d.index for d in tl.devices] == sorted({s.device for s in spans})
    for d in tl.devices:
        mine = [s for s in spans if s.device == d.index]
        assert d.busy_s <= tl.makespan_s + EPS
        assert d.busy_s <= sum(s.duration_s for s in mine) + EPS
        # The PE array runs one program at a time, so its work is all busy time.
        assert d.busy_s >= sum(s.duration_s for s in mine if s.kind in COMPUTE_KINDS) - 1e-9
        # Its work, and its static power while it waits.
        static = MNCORE2.static_power_w * (tl.makespan_s - d.busy_s)
        assert d.idle_energy_j == pytest.approx(static, abs=1e-12)
        assert d.energy_j == pytest.approx(sum(s.energy_j for s in mine) + d.idle_energy_j)
    assert 0.0 <= tl.bubble_fraction <= 1.0
    if tl.makespan_s > 0:
        busy = sum(d.busy_s for d in tl.devices)
        assert tl.bubble_fraction == pytest.approx(
            1 - busy / (len(tl.devices) * tl.makespan_s), abs=1e-9
        )
    d = tl.to_dict()
    assert set(d) == {"makespan_s", "energy_j", "idle_energy_j", "bubble_fraction", "devices"}
    assert d["idle_energy_j"] == pytest.approx(idle)
    assert all(set(x) == {"index", "busy_s", "energy_j", "idle_energy_j"} for x in d["devices"])


@given(workloads(), st.data())
@settings(max_examples=100, deadline=None)
def test_folding_onto_one_device_never_beats_that_devices_work(spans, data):
    target = data.draw(st.integers(0, 7))
    used = {s.device for s in spans} | {d for s in spans if s.link for d in s.link}
    folded = fold(spans, dict.fromkeys(used, target), MNCORE2)
    assert all(s.device == target and s.link is None for s in folded)
    # Every logical queue keeps a queue of its own.
    assert len({(s.device, s.queue) for s in spans}) == len({s.queue for s in folded})
    for old, new in zip(spans, folded):
        assert (new.key, new.kind, new.after) == (old.key, old.kind, old.after)
        if old.link is not None:  # a link copy became a local one
            assert new.duration_s == MNCORE2.local_copy_cost(old.nbytes).time_s
    tl = schedule(folded)
    work = sum(s.duration_s for s in folded if s.kind in COMPUTE_KINDS)
    assert tl.makespan_s >= work - 1e-9
    assert len(tl.devices) <= 1


@given(workloads(max_devices=4))
@settings(max_examples=50, deadline=None)
def test_folding_on_the_identity_map_changes_nothing(spans):
    used = {s.device for s in spans} | {d for s in spans if s.link for d in s.link}
    assert fold(spans, {d: d for d in used}) == spans


def _gpipe(p: int, m: int, t: float, copy_bytes: int | None = None) -> list[Span]:
    """A p-stage, m-microbatch GPipe forward as the compiler enqueues it: on each stage's
    queue, per microbatch, wait for the activation, run the fragment, copy it on and
    record the event the next stage waits for. `copy_bytes` None: transfers are free."""
    spans, key = [], itertools.count()
    recorded: dict[tuple[int, int], int] = {}
    for stage in range(p):
        for mb in range(m):
            if stage:
                k = next(key)
                spans.append(
                    Span(k, stage, 0, "wait_event", "wait", 0.0, 0.0, (recorded[stage - 1, mb],))
                )
            spans.append(Span(next(key), stage, 0, "program", f"F{stage}.{mb}", t, t * 300.0))
            if stage < p - 1:
                link = (stage, stage + 1)
                cost = 0.0 if copy_bytes is None else MNCORE2.copy_cost(*link, copy_bytes).time_s
                spans.append(
                    Span(
                        next(key),
                        stage,
                        0,
                        "copy",
                        "act",
                        cost,
                        0.0,
                        link=link,
                        nbytes=copy_bytes or 0,
                    )
                )
                recorded[stage, mb] = next(key)
                spans.append(Span(recorded[stage, mb], stage, 0, "record_event", "ev", 0.0, 0.0))
    return spans  # fmt: skip


@given(st.integers(1, 8), st.integers(1, 16), st.floats(1e-6, 1e-2))
def test_a_gpipe_forward_with_free_transfers_has_the_analytic_bubble(p, m, t):
    tl = schedule(_gpipe(p, m, t))
    assert tl.makespan_s == pytest.approx((m + p - 1) * t)
    assert tl.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
    assert all(d.busy_s == pytest.approx(m * t) for d in tl.devices)
    assert sum(f.kind == "event" for f in tl.flows) == (p - 1) * m


def test_the_4_stage_8_microbatch_pipeline_of_the_issue():
    tl = schedule(_gpipe(4, 8, 1e-3))
    assert tl.bubble_fraction == pytest.approx(3 / 11)
    single = schedule(fold(_gpipe(4, 8, 1e-3), dict.fromkeys(range(4), 0)))
    # GPipe's ideal, less the local copies the free link copies became on one device.
    assert single.makespan_s / tl.makespan_s == pytest.approx(32 / 11, rel=1e-3)


def test_transfers_that_cost_time_lengthen_the_pipeline():
    p, m, t, nbytes = 4, 8, 1e-3, 16 * MiB
    free = schedule(_gpipe(p, m, t))
    paid = schedule(_gpipe(p, m, t, copy_bytes=nbytes))
    # The recurrence of a pipeline whose copies sit on the producer's queue: a fragment
    # starts when the previous stage's copy of its microbatch has landed and its own
    # queue has finished the previous microbatch's fragment and copy.
    c = [MNCORE2.copy_cost(s, s + 1, nbytes).time_s for s in range(p - 1)] + [0.0]
    start = [[0.0] * m for _ in range(p)]
    for s, i in itertools.product(range(p), range(m)):
        arrived = start[s - 1][i] + t + c[s - 1] if s else 0.0
        free_queue = start[s][i - 1] + t + c[s] if i else 0.0
        start[s][i] = max(arrived, free_queue)
    assert paid.makespan_s == pytest.approx(start[p - 1][m - 1] + t)
    assert c[1] > c[0]  # stage 1 -> 2 crosses host switches
    assert paid.bubble_fraction > free.bubble_fraction


def _copy(key, src, dst, nbytes=8 * MiB, device=None, queue=0, after=()):
    cost = MNCORE2.copy_cost(src, dst, nbytes)
    return Span(
        key, src if device is None else device, queue, "copy", f"copy {src}->{dst}",
        cost.time_s, cost.energy_j, after, (src, dst), nbytes,
    )  # fmt: skip


def test_copies_through_one_switch_uplink_take_turns():
    tl = schedule([_copy(1, 0, 2), _copy(2, 1, 4)])  # both leave switch 0 for the host
    assert tl.start_s[2] == pytest.approx(tl.end_s[1])


def test_copies_on_disjoint_routes_overlap():
    tl = schedule([_copy(1, 0, 1), _copy(2, 2, 3), _copy(3, 1, 0, device=1)])
    assert tl.start_s == {1: 0.0, 2: 0.0, 3: 0.0}  # one switch each way: full duplex


def test_a_copy_on_a_second_queue_overlaps_compute_but_programs_take_turns():
    spans = [
        Span(1, 0, 0, "program", "a", 1e-3, 0.3),
        _copy(2, 0, 1, device=0, queue=1),
        Span(3, 0, 1, "program", "b", 1e-3, 0.3),
    ]
    tl = schedule(spans)
    assert tl.start_s[2] == 0.0
    assert tl.start_s[3] == pytest.approx(1e-3)  # the PE array was busy with "a"
    assert tl.devices[0].busy_s == pytest.approx(2e-3)


def test_a_wait_holds_its_queue_until_the_event_is_recorded():
    spans = [
        Span(1, 0, 0, "program", "produce", 2e-3, 0.0),
        Span(2, 0, 0, "record_event", "ev", 0.0, 0.0),
        Span(3, 1, 0, "wait_event", "wait", 0.0, 0.0, after=(2,)),
        Span(4, 1, 0, "program", "consume", 1e-3, 0.0),
    ]
    tl = schedule(spans)
    assert tl.start_s[4] == pytest.approx(2e-3) and tl.makespan_s == pytest.approx(3e-3)
    assert tl.flows == [(2, 3, "event")]
    assert tl.bubble_fraction == pytest.approx(1 - 3e-3 / (2 * 3e-3))


def _span(key, kind="program", device=0, after=(), duration=1.0):
    return Span(key, device, 0, kind, f"{kind} {key}", duration, 0.0, after)


@pytest.mark.parametrize(
    "spans, words",
    [
        ([_span(1, after=(2,)), _span(2, device=1, after=(1,))], "never start"),
        ([_span(1, "wait_event", after=(2,)), _span(2, "record_event")], "never start"),
        ([_span(1, after=(9,))], "unknown span 9"),
        ([_span(1), _span(1)], "used twice"),
        ([_span(1, duration=-1.0)], "duration_s"),
        ([_span(1, duration=math.nan)], "duration_s"),
        ([_span(1, device=-1)], "device"),
        (["not a span"], "not a Span"),
    ],
)
def test_spans_that_cannot_be_scheduled_are_named(spans, words):
    with pytest.raises(mnrt.InvalidArgumentError, match=words):
        schedule(spans)


def test_a_map_that_leaves_a_device_unplaced_is_named():
    with pytest.raises(mnrt.InvalidArgumentError, match="no logical device 1"):
        fold([_copy(1, 0, 1)], {0: 0})
    with pytest.raises(mnrt.InvalidArgumentError, match=r"device_map\[1\]"):
        fold([_copy(1, 0, 1)], {0: 0, 1: -2})


def test_folding_keeps_queues_apart_and_reprices_moved_copies():
    spans = [
        Span(1, 0, 0, "program", "a", 1e-3, 0.0),
        Span(2, 0, 1, "program", "b", 1e-3, 0.0),
        Span(3, 1, 0, "program", "c", 1e-3, 0.0),
        _copy(4, 1, 2, device=1),
    ]
    folded = fold(spans, {0: 0, 1: 0, 2: 3})
    assert [(s.device, s.queue) for s in folded] == [(0, 0), (0, 1), (0, 2), (0, 2)]
    assert folded[3].link == (0, 3)
    assert folded[3].duration_s == MNCORE2.copy_cost(0, 3, 8 * MiB).time_s
    # One PE array runs all three programs; the copy follows "c" on its queue.
    assert schedule(folded).makespan_s == pytest.approx(3e-3 + folded[3].duration_s)


def test_an_empty_schedule_is_empty():
    tl = schedule([])
    assert (tl.makespan_s, tl.energy_j, tl.bubble_fraction, tl.devices) == (0.0, 0.0, 0.0, [])


def _host(key: int, device: int, kind: str, queue: int = 0, duration: float = 1e-3) -> Span:
    return Span(key, device, queue, kind, f"{kind} {key}", duration, 0.0)


def test_host_transfers_share_the_links_between_the_host_and_their_boards():
    """Boards 0 and 1 sit behind one switch, board 2 behind another (2 a switch)."""
    assert MNCORE2.link.boards_per_switch == 2
    one_switch = schedule([_host(1, 0, "write"), _host(2, 1, "write")])
    assert one_switch.makespan_s == pytest.approx(2e-3)  # one uplink: they take turns
    two_switches = schedule([_host(1, 0, "write"), _host(2, 2, "write")])
    assert two_switches.makespan_s == pytest.approx(1e-3)
    both_ways = schedule([_host(1, 0, "write"), _host(2, 0, "read", queue=1)])
    assert both_ways.makespan_s == pytest.approx(1e-3)  # a link is full duplex
    into_board = [
        Span(1, 1, 0, "copy", "copy 1->0", 1e-3, 0.0, link=(1, 0)),
        _host(2, 0, "write", queue=1),
    ]
    assert schedule(into_board).makespan_s == pytest.approx(2e-3)  # both use sw0->b0
