"""MPMD pipelines (the Shardy MPMD model): a graph split into fragments on devices and
stages, transfers between them, the passes over that IR and the pipeline schedules."""

from .ir import Fragment, MpmdError, MpmdProgram, Transfer
from .options import MpmdOptions, parse_assignment, parse_mpmd
from .partition import partition
from .passes import PASSES, PIPELINE, run_pass, run_pipeline
from .schedule import SCHEDULES, Plan, Task, analytic_bubble, plan
from .text import dump, parse

__all__ = [
    "PASSES",
    "PIPELINE",
    "SCHEDULES",
    "Fragment",
    "MpmdError",
    "MpmdOptions",
    "MpmdProgram",
    "Plan",
    "Task",
    "Transfer",
    "analytic_bubble",
    "dump",
    "parse",
    "parse_assignment",
    "parse_mpmd",
    "partition",
    "plan",
    "run_pass",
    "run_pipeline",
]
