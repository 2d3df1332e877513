"""`mnrt`: the click group. Subcommands live in their own modules and load lazily, so
`mnrt smi` never imports what `mnrt compile` needs. Every `MnrtError` is caught here, once,
printed on one line and turned into its exit code."""

from __future__ import annotations

import importlib
import sys

import click

from ..errors import MnrtError

# name -> "module:attribute", relative to mnrt.runner
_SUBCOMMANDS = {
    "bench": "run:bench",
    "compile": "compile:compile_cmd",
    "convert": "inspect:convert",
    "demo": "compile:demo",
    "dump": "inspect:dump",
    "info": "inspect:info",
    "run": "run:run",
    "smi": "smi:smi",
    "verify": "inspect:verify",
}

_MAX_MESSAGE = 2000  # characters of an error message the CLI prints


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = _SUBCOMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), attr)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except MnrtError as e:
            message = " ".join(str(e).split())
            if len(message) > _MAX_MESSAGE:  # it quotes a hostile binary's megabyte-long name
                message = f"{message[: _MAX_MESSAGE - 40]}... ({len(message)} characters)"
            click.echo(f"mnrt: error: {message}", err=True)
            ctx.exit(e.exit_code)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mnrt", prog_name="mnrt")
def cli() -> None:
    """Run, inspect and manage MN-Core 2 light binaries on emulated devices."""


def main() -> None:
    cli(prog_name="mnrt")


if __name__ == "__main__":
    sys.exit(main())
