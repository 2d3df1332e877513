"""`mnrt`: the click group. Subcommands live in their own modules and load lazily, so
`mnrt smi` never imports what `mnrt compile` needs. Every `MnrtError` is caught here, once,
printed on one line and turned into its exit code."""

from __future__ import annotations

import importlib
import json
import sys
import warnings

import click

from ..errors import EXIT_INTERRUPTED, MnrtError, error_dict
from . import interrupt

# name -> "module:attribute", relative to mnrt.runner
_SUBCOMMANDS = {
    "bench": "bench:bench",
    "clean": "clean:clean",
    "compile": "compile:compile_cmd",
    "convert": "inspect:convert",
    "dashboard": "dashboard:dashboard",
    "demo": "compile:demo",
    "diff": "diff:diff_cmd",
    "dump": "inspect:dump",
    "info": "inspect:info",
    "optimize": "edit:optimize_cmd",
    "reduce": "reduce:reduce_cmd",
    "run": "run:run",
    "smi": "smi:smi",
    "trim": "edit:trim_cmd",
    "verify": "inspect:verify",
}

# Subcommands whose --json makes every error a JSON document on stdout too (dump's output
# is always JSON and smi's is short: their errors stay one line on stderr).
_JSON_ERRORS = {
    "bench",
    "compile",
    "convert",
    "diff",
    "info",
    "optimize",
    "reduce",
    "run",
    "verify",
}
_MAX_MESSAGE = 2000  # characters of an error message the CLI prints
# A group called with no command shows its help (click >= 8.2 raises this for it).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = _SUBCOMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), attr)

    json_errors = False  # set by main: the command line asks for --json

    def invoke(self, ctx: click.Context):
        try:
            with interrupt.kept(), warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except MnrtError as e:
            _fail(str(e), e.exit_code, type(e).__name__, self.json_errors)
        except KeyboardInterrupt:  # before click's Abort, which prints a blank line first
            _fail("interrupted", EXIT_INTERRUPTED, "KeyboardInterrupt", self.json_errors)

    def main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        """As click's, but a usage error (an unknown flag, a bad value) is one line too,
        like mnrt's own errors, with click's exit code (2). With --json on the command line
        every error is a JSON document on stdout instead (see `_fail`)."""
        argv = list(sys.argv[1:] if args is None else args)
        options = argv[: argv.index("--")] if "--" in argv else argv
        self.json_errors = bool(argv) and argv[0] in _JSON_ERRORS and "--json" in options
        if not standalone_mode:
            return super().main(args, *rest, standalone_mode=False, **kwargs)
        try:
            code = super().main(args, *rest, standalone_mode=False, **kwargs)
        except _NO_ARGS_IS_HELP as e:  # bare `mnrt` or `mnrt smi`: the help itself
            e.show()
            sys.exit(e.exit_code)
        except click.ClickException as e:
            hint = f" (see {e.ctx.command_path} --help)" if getattr(e, "ctx", None) else ""
            _fail(e.format_message() + hint, e.exit_code, "UsageError", self.json_errors)
        except click.Abort:
            _fail("interrupted", EXIT_INTERRUPTED, "KeyboardInterrupt", self.json_errors)
        sys.exit(code if isinstance(code, int) else 0)  # an Exit's code (--help: 0)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr, as errors are (`mnrt: warning: ...`): Python's own
    format names the line of click that called the command, and quotes it."""
    click.echo(f"mnrt: warning: {' '.join(str(message).split())}", err=True)


def _fail(message: str, code: int, kind: str, as_json: bool) -> None:
    """One line on stderr (`mnrt: error: ...`), or with --json one JSON document on stdout,
    {"error": {"type", "message", "exit_code"}}; then exit with `code`."""
    message = _one_line(message)
    if len(message) > _MAX_MESSAGE:  # it quotes a hostile binary's megabyte-long name
        message = f"{message[: _MAX_MESSAGE - 40]}... ({len(message)} characters)"
    if as_json:
        click.echo(json.dumps({"error": error_dict(kind, message, code)}, indent=1))
    else:
        click.echo(f"mnrt: error: {message}", err=True)
    sys.exit(code)


def _one_line(message: str) -> str:
    """A message of several lines on one: a list's items (an importer's problems, one a
    line) kept apart by '; ', not run together."""
    lines = [" ".join(line.split()) for line in message.splitlines()]
    text = ""
    for line in filter(None, lines):
        text += line if not text else (" " if text.endswith(":") else "; ") + line
    return text


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mnrt", prog_name="mnrt")
def cli() -> None:
    """Run, inspect and manage MN-Core 2 light binaries on emulated devices."""


def main() -> None:
    cli(prog_name="mnrt")


if __name__ == "__main__":
    sys.exit(main())
