"""verify-stage-merging: each stage is one fragment.

The pipeline schedule runs a stage per microbatch as one unit; two fragments of one stage
on one device mean the stage's work is split by another stage's (stage s feeds stage t,
which feeds stage s again), which no merge can join without a cycle. That is an error
naming both fragments, to be fixed in the stage_assignment.
"""

from __future__ import annotations

from ..ir import Fragment, MpmdError, MpmdProgram

NAME = "verify-stage-merging"


def run(program: MpmdProgram) -> MpmdProgram:
    seen: dict[tuple[int, int], Fragment] = {}
    for op in program.fragments:
        other = seen.setdefault((op.stage, op.device), op)
        if other is not op:
            raise MpmdError(
                f"stage {op.stage} on device {op.device} is two fragments, @{other.name} "
                f"(origin {list(other.origin)}) and @{op.name} (origin {list(op.origin)}): "
                "work of another stage lies between them and depends on one and feeds the "
                "other; assign that work to the same stage, or the two parts to different "
                "stages"
            )
    return program.copy()
