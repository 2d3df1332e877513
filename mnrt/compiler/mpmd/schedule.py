"""Pipeline schedules: which (stage, microbatch) each device runs, in which order.

- gpipe: one stage per device; each device runs its stage for microbatch 0, 1, ... M-1.
  With p stages of equal time t and M microbatches the makespan is (M + p - 1) t, so the
  bubble (idle share of devices x makespan) is (p - 1) / (M + p - 1).
- circular: v = stages / p virtual stages per device, stage s on device s mod p: the
  microbatches go round the devices v times; each device runs its first stage for every
  microbatch, then its second, and so on. With stages of equal time t/v (the same model,
  cut finer) and M >= p, the makespan is (v M + p - 1) t / v, so the bubble is
  (p - 1) / (v M + p - 1): v times smaller a startup than gpipe's.

Each schedule is a function registered in SCHEDULES; `plan` adds the dependencies between
stages the program has and a global order that respects them (the order the host enqueues
in), and refuses a schedule that would wait forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .ir import Fragment, MpmdError, MpmdProgram, Transfer


@dataclass(frozen=True)
class Task:
    stage: int
    microbatch: int


def gpipe(devices: int, stages: int, microbatches: int) -> list[list[Task]]:
    """Per device (0..devices-1), its tasks in order."""
    return [[Task(d, m) for m in range(microbatches)] for d in range(devices)]


def circular(devices: int, stages: int, microbatches: int) -> list[list[Task]]:
    """Each device runs its first stage for every microbatch, then its second, ... (the
    breadth-first order): the last device's results loop back to the first device while it
    still works through its earlier stage, so that copy has M - p stage times of slack,
    where rounds of p microbatches (Megatron's interleaved order) leave it none."""
    v = stages // devices
    return [
        [Task(j * devices + d, m) for j in range(v) for m in range(microbatches)]
        for d in range(devices)
    ]


SCHEDULES: dict[str, Callable[[int, int, int], list[list[Task]]]] = {
    "gpipe": gpipe,
    "circular": circular,
}


def analytic_bubble(schedule: str, devices: int, stages: int, microbatches: int) -> float:
    """The bubble fraction of the schedule with equal stage times (formulas above)."""
    v = stages // devices if schedule == "circular" else 1
    return (devices - 1) / (v * microbatches + devices - 1)


@dataclass(frozen=True)
class Plan:
    """A schedule for a program: per device index (as the options name it) its tasks in
    order, each stage's fragment, what each stage waits for, and a global order."""

    schedule: str
    per_device: dict[int, list[Task]]
    fragments: dict[int, Fragment]
    needs: dict[int, tuple[int, ...]]  # stage -> stages whose results it reads
    order: tuple[Task, ...]


def stage_needs(program: MpmdProgram) -> dict[int, tuple[int, ...]]:
    """Stage -> the stages whose fragments make values it reads (through transfers)."""
    producer = program.producer()
    needs: dict[int, set[int]] = {}
    for fragment in program.fragments:
        mine = needs.setdefault(fragment.stage, set())
        for name in fragment.inputs:
            op = program.ops[producer[name]] if name in producer else None
            while isinstance(op, Transfer):
                op = program.ops[producer[op.source]] if op.source in producer else None
            if isinstance(op, Fragment) and op.stage != fragment.stage:
                mine.add(op.stage)
    return {s: tuple(sorted(n)) for s, n in needs.items()}


def plan(
    program: MpmdProgram, devices: tuple[int, ...], stages: int, schedule: str, microbatches: int
) -> Plan:
    fragments = {f.stage: f for f in program.fragments}
    missing = sorted(set(range(stages)) - set(fragments))
    if missing:
        raise MpmdError(
            f"stage(s) {', '.join(map(str, missing))} hold no work after the passes; use "
            "fewer stages, or assign nodes to them"
        )
    per = SCHEDULES[schedule](len(devices), stages, microbatches)
    per_device = {devices[d]: tasks for d, tasks in enumerate(per)}
    needs = stage_needs(program)
    done: set[Task] = set()
    cursor = dict.fromkeys(per_device, 0)
    order: list[Task] = []
    while len(order) < sum(map(len, per)):
        progressed = False
        for d, tasks in per_device.items():
            while cursor[d] < len(tasks):
                task = tasks[cursor[d]]
                if any(Task(s, task.microbatch) not in done for s in needs.get(task.stage, ())):
                    break
                done.add(task)
                order.append(task)
                cursor[d] += 1
                progressed = True
        if not progressed:
            stuck = {
                d: tasks[cursor[d]] for d, tasks in per_device.items() if cursor[d] < len(tasks)
            }
            raise MpmdError(f"schedule {schedule} waits forever: next tasks {stuck}")
    return Plan(schedule, per_device, fragments, needs, tuple(order))
