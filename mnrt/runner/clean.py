"""`mnrt clean`: list or remove what writers killed mid-write left behind."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import InvalidArgumentError
from ..format.files import leftovers, remove_leftovers


@click.command()
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path))
@click.option("--list", "list_only", is_flag=True, help="Only list them; remove nothing.")
def clean(folders: tuple[Path, ...], list_only: bool) -> None:
    """Remove temporary files and staging folders (.mnrt-<pid>-<hex>.tmp) that mnrt
    writers killed mid-write left in FOLDERS (default: the current folder). Those of a
    process still running are kept. The next write to a folder removes them too."""
    for folder in folders:  # a mistyped one would report "0 removed" as if it were clean
        _check_folder(folder)
    found = [p for folder in folders or (Path("."),) for p in leftovers(folder)]
    done = found if list_only else remove_leftovers(found)
    for path in done:
        click.echo(str(path))
    verb = "left behind" if list_only else "removed"
    click.echo(f"{len(done)} leftover(s) {verb}", err=True)


def _check_folder(folder: Path) -> None:
    """A folder `mnrt clean` can look in: one that is not there, is a file, or cannot be
    listed (a name too long, no permission) would report "0 removed" as if it were clean."""
    try:
        os.listdir(folder)
    except NotADirectoryError:
        why = "is not a folder"
    except FileNotFoundError:
        why = "does not exist"
    except OSError as e:
        why = f"cannot be read ({e.strerror or e})"
    else:
        return
    raise InvalidArgumentError(f"{folder} {why}; give the folders to clean")
