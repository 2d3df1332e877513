"""Running the CLI in-process, for the smi tests."""

from __future__ import annotations

from click.testing import CliRunner

from mnrt.runner.cli import cli


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def one_line_error(r) -> str:
    """The CLI's one error line (and that there is only one)."""
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mnrt: error: "), r.output
    return lines[0]
