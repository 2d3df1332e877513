"""From a graph to the first MPMD program (the import step).

Each node gets a stage:
- a node whose name starts with a `stage_assignment` prefix is the user's (the longest
  matching prefix wins);
- without any assignment, the node order is cut into `stages` contiguous runs of about
  equal modelled time (the linear partition that minimises the slowest stage);
- other nodes are inferred from use sets, as Shardy infers meshes: the earliest stage that
  reads the node's results, else (results only returned) the latest stage it reads from.
Values only move to the same or a later stage (a forward pipeline); an assignment that
sends one backwards is refused, naming the two nodes. Consecutive nodes of one stage and
origin become one fragment; each value a fragment reads from another device gets a
transfer just before that fragment (one per reader: later passes remove the repeats).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...device.spec import MNCORE2, DeviceSpec
from ..ir import PARAM, Graph, Value
from .cost import node_time
from .ir import Fragment, MpmdError, MpmdProgram, Transfer
from .options import MpmdOptions


def balanced_cuts(costs: Sequence[float], parts: int) -> list[int]:
    """Stage of each item: `parts` contiguous non-empty runs, the largest run sum as small
    as a bisection on it finds (greedy fill under a cap is optimal for a given cap)."""
    if len(costs) < parts:
        n = len(costs)
        raise MpmdError(
            f"the optimised graph has {n} node{'' if n == 1 else 's'}, too few to fill {parts} "
            "stages (each stage runs at least one); use fewer stages or devices"
        )

    def runs(cap: float) -> list[int]:
        stage, total, out = 0, 0.0, []
        for i, c in enumerate(costs):
            left = len(costs) - i  # items from here on; every later stage needs one
            if out and (total + c > cap or left == parts - stage - 1) and stage < parts - 1:
                stage, total = stage + 1, 0.0
            total += c
            out.append(stage)
        return out

    def fits(cap: float) -> bool:
        out = runs(cap)
        sums = [0.0] * parts
        for c, s in zip(costs, out):
            sums[s] += c
        return max(sums) <= cap * (1 + 1e-12)

    low, high = max(costs), sum(costs)
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (low, mid) if fits(mid) else (mid, high)
    return runs(high)


def _prefix_stage(name: str, assignment: Mapping[str, int]) -> tuple[int, str] | None:
    matches = [p for p in assignment if name.startswith(p)]
    if not matches:
        return None
    best = max(matches, key=len)
    return assignment[best], best


def assign(
    graph: Graph, stages: int, assignment: Mapping[str, int], spec: DeviceSpec = MNCORE2
) -> list[tuple[int, str]]:
    """(stage, origin prefix or "" when inferred) of every node."""
    nodes = graph.nodes
    if not assignment:
        cuts = balanced_cuts([node_time(n, graph.values, spec) for n in nodes], stages)
        return [(s, "") for s in cuts]
    for prefix, stage in assignment.items():
        if stage >= stages:
            raise MpmdError(
                f"stage_assignment[{prefix!r}] = {stage}, but there are {stages} stages "
                f"(0..{stages - 1})"
            )
    out: list[tuple[int, str] | None] = [_prefix_stage(n.name, assignment) for n in nodes]
    if all(o is None for o in out):
        raise MpmdError(
            f"no node name starts with a stage_assignment prefix ({', '.join(assignment)}); "
            f"node names look like {', '.join(repr(n.name) for n in nodes[:3])}"
        )
    producer = graph.producers()
    readers: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.inputs:
            if name in producer:
                readers.setdefault(producer[name], []).append(i)
    for i in range(len(nodes) - 1, -1, -1):  # use sets: the earliest stage reading it
        if out[i] is None:
            used = [out[j][0] for j in readers.get(i, ()) if out[j] is not None]
            out[i] = (min(used), "") if used else None
    for i, node in enumerate(nodes):  # results only returned: the latest stage it reads
        if out[i] is None:
            came = [out[producer[n]][0] for n in node.inputs if n in producer]
            out[i] = (max(came, default=0), "")
    done: list[tuple[int, str]] = [o for o in out if o is not None]
    empty = sorted(set(range(stages)) - {s for s, _ in done})
    if empty:
        raise MpmdError(
            f"stage_assignment leaves stage(s) {', '.join(map(str, empty))} without nodes; "
            f"assign prefixes to every stage 0..{stages - 1}, or use fewer stages"
        )
    for i, node in enumerate(nodes):
        for name in node.inputs:
            j = producer.get(name)
            if j is not None and done[j][0] > done[i][0]:
                raise MpmdError(
                    f"stage_assignment sends %{name} backwards: node {nodes[j].name!r} is in "
                    f"stage {done[j][0]} and node {node.name!r}, which reads it, in stage "
                    f"{done[i][0]}; a forward pipeline only moves values to later stages"
                )
    return done


def partition(
    graph: Graph,
    opts: MpmdOptions,
    assignment: Mapping[str, int],
    spec: DeviceSpec = MNCORE2,
) -> MpmdProgram:
    """The import step: fragments and transfers of `graph` (see the module docstring)."""
    stages = assign(graph, opts.stages, assignment, spec)
    graph = graph.copy()  # its nodes become the fragments': the caller's graph stays as is
    program = MpmdProgram(
        graph.name, dict(graph.values), list(graph.inputs), list(graph.outputs), [], {}
    )
    runs: list[tuple[tuple[int, str], list[int]]] = []
    for i, key in enumerate(stages):
        if runs and runs[-1][0] == key:
            runs[-1][1].append(i)
        else:
            runs.append((key, [i]))
    fragments = []
    for k, ((stage, origin), members) in enumerate(runs):
        nodes = [graph.nodes[i] for i in members]
        fragment = Fragment(
            f"s{stage}_{k}", stage, opts.device_of(stage), nodes, origin=(origin,) if origin else ()
        )
        fragment.inputs = [n for n in fragment.reads() if graph.values[n].role != PARAM]
        fragments.append(fragment)
    used = set(graph.outputs)
    for fragment in reversed(fragments):
        fragment.outputs = [n for n in fragment.defines() if n in used]
        used.update(fragment.inputs)
    for name in graph.inputs:
        first = next((f for f in fragments if name in f.inputs), None)
        program.homes[name] = first.device if first is not None else opts.devices[0]
    where = dict(program.homes)
    for fragment in fragments:
        for name in list(fragment.inputs):
            if where[name] != fragment.device:
                moved = program.fresh(f"{name}.to{fragment.device}.")
                program.values[moved] = Value(
                    moved, graph.values[name].shape, graph.values[name].dtype
                )
                program.ops.append(
                    Transfer(program.fresh("t"), name, moved, where[name], fragment.device)
                )
                _rename_read(fragment, name, moved)
        program.ops.append(fragment)
        where.update(dict.fromkeys(fragment.defines(), fragment.device))
    program.verify()
    return program


def _rename_read(fragment: Fragment, old: str, new: str) -> None:
    fragment.inputs = [new if n == old else n for n in fragment.inputs]
    for node in fragment.nodes:
        node.inputs = [new if n == old else n for n in node.inputs]
