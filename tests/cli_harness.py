"""Running the CLI in-process, for the runner, replay and compiler tests (this folder is on
sys.path through tests/conftest.py, so every test folder imports it)."""

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


def invoke_cli(*args) -> tuple[int, str]:
    """(exit code, output) of `mnrt ARGS...`; arguments may be paths or numbers."""
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.output


def assert_one_line_error(code: int, out: str, pattern: str) -> None:
    """A usage or invalid-binary error (exit 2): one line, no traceback, naming `pattern`."""
    assert code == 2, out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert out.startswith("mnrt: error:") and pattern in out, out
