"""`mnrt trim` and `mnrt optimize`: new binaries cut from one, verified by replay first."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import InvalidArgumentError
from ..format import LightBinary, strict_json
from ..format.files import check_usable
from ..replay.optimize import optimize
from ..replay.trim import parse_range, trim
from .args import BinaryPath


def check_output_path(file: Path, out: Path) -> None:
    """Refuse an output path that is the input or cannot be a new file."""
    check_usable(out, "-o ")
    if out.resolve() == file.resolve():
        raise InvalidArgumentError(f"-o {out} is the input binary; write the result elsewhere")
    if out.is_dir() or not out.resolve().parent.is_dir():
        raise InvalidArgumentError(f"cannot write {out}: give a file path in an existing directory")


@click.command("trim")
@click.argument("file", type=BinaryPath())
@click.option(
    "--commands",
    "commands",
    required=True,
    metavar="START:STOP",
    help="The commands to keep, as a Python slice of command indices (see mnrt dump).",
)
@click.option(
    "-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path)
)
def trim_cmd(file: Path, commands: str, out: Path) -> None:
    """Write commands START..STOP-1 of FILE as a replayable binary: a state snapshot of the
    live objects they use first. The slice is replayed before it is written."""
    check_output_path(file, out)
    binary = LightBinary.load(file)
    start, stop = parse_range(commands, len(binary))
    result = trim(binary, start, stop)
    result.save(out)
    click.echo(
        f"wrote {out}: commands {start}:{stop} of {len(binary)} after a "
        f"{len(result) - (stop - start)}-command state snapshot; replayed: PASS"
    )


@click.command("optimize")
@click.argument("file", type=BinaryPath())
@click.option(
    "-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path)
)
@click.option("--json", "as_json", is_flag=True, help="Print what changed as JSON.")
def optimize_cmd(file: Path, out: Path, as_json: bool) -> None:
    """Drop dead commands and buffers, create identical programs once, store payloads once
    and recompress them. The result is replayed (and must pass) before it is written."""
    check_output_path(file, out)
    result, stats = optimize(LightBinary.load(file))
    result.save(out)
    if as_json:
        click.echo(strict_json.dumps({"output": str(out), **stats.to_dict()}, indent=1))
        return
    (c0, c1), (b0, b1) = stats.commands, stats.bytes
    click.echo(
        f"wrote {out}: {c0} -> {c1} commands, {b0} -> {b1} bytes ({b1 / b0:.1%}), "
        f"{stats.buffers_dropped} buffers dropped, {stats.programs_merged} programs merged; "
        "replayed: PASS"
    )
