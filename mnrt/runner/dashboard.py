"""`mnrt dashboard PATH [OTHER]`: web pages for a codegen_dir, a binary or a run report.
The pages' dependencies (the `dashboard` extra) are imported only here, when it runs."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import InvalidArgumentError

_EXTRA = "pip install mnrt[dashboard]"


def _load():
    """mnrt.dashboard, or a usage error (exit 2) naming the extra to install."""
    try:
        from .. import dashboard
    except ImportError as e:
        raise InvalidArgumentError(
            f"mnrt dashboard needs the dashboard extra ({e.name or e} is not installed): {_EXTRA}"
        ) from None
    return dashboard


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.argument("other", required=False, type=click.Path(path_type=Path))
@click.option("--port", default=8327, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--export",
    "export_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the pages as static files into DIR instead of serving them.",
)
def dashboard(path, other, port, host, export_dir) -> None:
    """Pages for PATH (a codegen_dir, a .mnlb binary or a run report); with OTHER (a second
    binary or codegen_dir), both binaries side by side. Serves on localhost by default."""
    board = _load()
    art = board.open_dashboard(path, other)
    if export_dir is not None:
        statuses = board.export(art, export_dir)
        failed = [slug for slug, status in statuses.items() if status != 200]
        note = f" ({len(failed)} show an error: {', '.join(failed)})" if failed else ""
        click.echo(f"wrote {len(statuses)} pages to {export_dir}{note}")
        return
    board.serve(art, host, port, ready=lambda url: click.echo(f"mnrt dashboard: {url}", err=True))
