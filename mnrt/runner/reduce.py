"""`mnrt reduce FILE -o OUT`: a minimal binary that fails as FILE does."""

from __future__ import annotations

from pathlib import Path

import click

from ..format import LightBinary, strict_json
from ..replay.reduce import reduce
from .args import BinaryPath, FiniteRange
from .edit import check_output_path


@click.command("reduce")
@click.argument("file", type=BinaryPath())
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the reduced binary (default: FILE's name with .reduced.mnlb).",
)
@click.option(
    "--failing",
    is_flag=True,
    help="Keep what makes FILE fail (golden mismatch, device error, wrong kernel): the "
    "one criterion there is, accepted for scripts that name it.",
)
@click.option(
    "--time-limit",
    type=FiniteRange(min=0.1),
    default=600.0,
    show_default=True,
    help="Seconds to spend; the smallest binary found by then is written.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON.")
def reduce_cmd(
    file: Path, out: Path | None, failing: bool, time_limit: float, as_json: bool
) -> None:
    """Shrink FILE, a binary that fails (golden mismatch or device error), to a minimal
    binary that fails the same way: the kernel the failure names, alone on the data it had
    (when it names one); for failing goldens of a binary without fingerprints, what their
    values flow from; else delta debugging over commands and kernels. Prints each step.

    Exit codes: 0 reduced and written, 2 FILE does not fail (or is unreadable)."""
    binary = LightBinary.load(file)  # first: FILE names no binary (say '') but a folder
    if out is None:
        out = file.with_name(f"{file.stem}.reduced.mnlb")
    check_output_path(file, out)
    result = reduce(binary, time_limit_s=time_limit)
    result.binary.save(out)
    reproduce = f"mnrt run {out}{result.failure.reproduce}"
    if as_json:
        doc = {"output": str(out), **result.to_dict(), "reproduce": reproduce}
        click.echo(strict_json.dumps(doc, indent=1))
        return
    click.echo(f"failure: {result.failure.describe()}")
    for s in result.steps:
        click.echo(
            f"  {s['step']}: {s['tests']} replays, commands {s['commands'][0]} -> "
            f"{s['commands'][1]}, kernels {s['kernels'][0]} -> {s['kernels'][1]}"
        )
        if "note" in s:
            click.echo(f"    {s['note']}")
    click.echo(
        f"wrote {out}: {len(result.binary)} commands, {result.to_dict()['kernels']} kernel(s), "
        f"in {result.seconds:.2f} s"
    )
    click.echo(f"reproduce: {reproduce}")
