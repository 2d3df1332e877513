"""Pipeline schedules: the order each device runs (stage, microbatch) in, the dependency
order the host enqueues in, and the analytic bubble with equal stage times."""

from __future__ import annotations

import pytest

from mnrt.compiler.mpmd import MpmdError, Task, analytic_bubble, parse, plan
from mnrt.compiler.mpmd import schedule as schedules


def _chain(stages: int, devices: int) -> str:
    """A chain of `stages` single-node fragments, stage s on device s mod devices."""
    lines = ["func @chain", "  input %v0: float[4] device=0"]
    for s in range(stages):
        d, prev = s % devices, (s - 1) % devices
        src = f"%v{s}"
        if s and d != prev:
            lines.append(f"  transfer @t{s} %v{s} -> %v{s}.t device {prev} -> {d}")
            src = f"%v{s}.t"
        lines += [
            f"  fragment @s{s} stage={s} device={d} origin=[] ({src}) -> (%v{s + 1}) {{",
            f'    %v{s + 1}: float[4] = relu({src}) {{}} name="n{s}"',
            "  }",
        ]
    lines.append(f"  return %v{stages}")
    return "\n".join(lines) + "\n"


def _simulate(p, devices) -> tuple[float, float]:
    """Makespan and bubble with every task one time unit and free transfers."""
    end: dict[Task, float] = {}
    free = dict.fromkeys(devices, 0.0)
    where = {t: d for d, tasks in p.per_device.items() for t in tasks}
    for task in p.order:
        ready = max([end[Task(s, task.microbatch)] for s in p.needs[task.stage]], default=0.0)
        start = max(free[where[task]], ready)
        end[task] = free[where[task]] = start + 1
    makespan = max(end.values())
    return makespan, 1 - len(end) / (len(devices) * makespan)


@pytest.mark.parametrize("m", [1, 4, 8])
def test_gpipe_makespan_and_bubble_match_the_analytic_figures(m):
    p = plan(parse(_chain(4, 4)), (0, 1, 2, 3), 4, "gpipe", m)
    assert p.per_device[2] == [Task(2, k) for k in range(m)]
    makespan, bubble = _simulate(p, (0, 1, 2, 3))
    assert makespan == m + 3
    assert bubble == pytest.approx(analytic_bubble("gpipe", 4, 4, m))


@pytest.mark.parametrize("m", [4, 8])
def test_circular_makespan_and_bubble_match_the_analytic_figures(m):
    p = plan(parse(_chain(8, 4)), (0, 1, 2, 3), 8, "circular", m)
    # Device 1 runs stage 1 for every microbatch, then stage 5 for every one.
    assert p.per_device[1] == [Task(1, k) for k in range(m)] + [Task(5, k) for k in range(m)]
    makespan, bubble = _simulate(p, (0, 1, 2, 3))
    assert makespan == 2 * m + 3  # (v M + p - 1) stage-times of t / v
    assert bubble == pytest.approx(analytic_bubble("circular", 4, 8, m))
    assert analytic_bubble("circular", 4, 8, 8) == pytest.approx(3 / 19)


def test_device_indices_are_the_options_own():
    p = plan(parse(_chain(2, 2)), (5, 7), 2, "gpipe", 2)
    assert sorted(p.per_device) == [5, 7] and p.needs == {0: (), 1: (0,)}


def test_a_stage_left_empty_is_refused():
    with pytest.raises(MpmdError, match=r"stage\(s\) 2, 3 hold no work"):
        plan(parse(_chain(2, 2)), (0, 1, 2, 3), 4, "gpipe", 2)


def test_an_order_that_waits_forever_is_refused(monkeypatch):
    def backwards(devices, stages, microbatches):
        return [
            [
                Task(s, m)
                for s in range(stages - devices + d, -1, -devices)
                for m in range(microbatches)
            ]
            for d in range(devices)
        ]

    monkeypatch.setitem(schedules.SCHEDULES, "circular", backwards)
    with pytest.raises(MpmdError, match="waits forever"):
        plan(parse(_chain(4, 2)), (0, 1), 4, "circular", 2)
