"""`mnrt diff A B`: what differs between two light binaries."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import EXIT_GOLDEN_MISMATCH
from ..format import LightBinary, strict_json
from ..replay.diff import diff, to_text
from .args import BinaryPath


@click.command("diff")
@click.argument("a", type=BinaryPath())
@click.argument("b", type=BinaryPath())
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
def diff_cmd(a: Path, b: Path, as_json: bool) -> None:
    """Compare two light binaries command by command: programs and kernels (attributes and
    mapping), written data by hash, goldens by value.

    Exit codes: 0 equal (creation metadata aside), 1 different, 2 unreadable or usage."""
    d = diff(LightBinary.load(a), LightBinary.load(b))
    click.echo(strict_json.dumps(d, indent=1, default=str) if as_json else to_text(d))
    sys.exit(0 if d["equal"] else EXIT_GOLDEN_MISMATCH)
