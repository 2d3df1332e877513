"""The MPMD passes: one module each, registered here by their Shardy names (without the
`mpmd-` prefix); PIPELINE is the order a pipelined compile runs them in."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import MpmdError, MpmdProgram
from . import (
    absorb_inferred_fragments,
    copy_constants,
    fragment_dce,
    fragment_dedup,
    merge_inferred_fragments,
    merge_transfers,
    merge_user_fragments_into_scheduling_units,
    move_transfers_to_producer,
    remove_transfer_cycles,
    uniquify_function_inputs_outputs,
    verify_stage_merging,
)

Pass = Callable[[MpmdProgram], MpmdProgram]

PASSES: dict[str, Pass] = {
    m.NAME: m.run
    for m in (
        absorb_inferred_fragments,
        copy_constants,
        fragment_dce,
        fragment_dedup,
        merge_inferred_fragments,
        merge_transfers,
        merge_user_fragments_into_scheduling_units,
        move_transfers_to_producer,
        remove_transfer_cycles,
        uniquify_function_inputs_outputs,
        verify_stage_merging,
    )
}

PIPELINE = (
    "uniquify-function-inputs-outputs",
    "copy-constants",
    "move-transfers-to-producer",
    "absorb-inferred-fragments",
    "merge-inferred-fragments",
    "merge-user-fragments-into-scheduling-units",
    "remove-transfer-cycles",
    "merge-transfers",
    "fragment-dedup",
    "fragment-dce",
    "verify-stage-merging",
)


def run_pass(name: str, program: MpmdProgram) -> MpmdProgram:
    """One pass by name; the result is verified, so a pass bug surfaces at that pass."""
    try:
        fn = PASSES[name]
    except KeyError:
        raise MpmdError(f"unknown MPMD pass {name!r}; passes: {', '.join(PASSES)}") from None
    out = fn(program)
    out.verify()
    return out


def run_pipeline(
    program: MpmdProgram, names: tuple[str, ...] = PIPELINE
) -> list[tuple[str, MpmdProgram]]:
    """(pass name, program after it) for each pass in `names`, in order."""
    after = []
    for name in names:
        program = run_pass(name, program)
        after.append((name, program))
    return after
