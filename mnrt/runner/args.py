"""Command-line values that several subcommands parse: NAME=VALUE pairs, device indices,
finite numbers, light binaries."""

from __future__ import annotations

import math
import os
from pathlib import Path

import click

from .. import errors


def pair(spec: str, form: str) -> tuple[str, str]:
    """NAME=VALUE split at the first '='; `form` shows the expected form in the error."""
    name, sep, value = spec.partition("=")
    if not sep or not name or not value:
        raise click.BadParameter(f"{spec!r}: write {form}")
    return name, value


def named_sources(specs: tuple[str, ...], flag: str, form: str) -> dict[str, str]:
    """Repeated `flag NAME=SOURCE` options (--input, --expected) as a dict; naming one twice
    is an error, not a silent choice of the last one."""
    given: dict[str, str] = {}
    for spec in specs:
        name, source = pair(spec, form)
        if name in given:
            what = flag.lstrip("-")
            raise click.BadParameter(f"{what} {name} is given twice", param_hint=flag)
        given[name] = source
    return given


def device_index(value: str) -> int | str:
    """`--device`: 'auto' (the first free device) or an index, which the device layer
    checks against the devices there are."""
    if value == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        raise errors.InvalidArgumentError(
            f"--device {value!r}: use 'auto' or a device index"
        ) from None


class FiniteRange(click.FloatRange):
    """click.FloatRange that refuses nan and inf as well: its bounds are comparisons, which
    nan passes (a --tolerance of nan let every regression through, a --time-limit of nan
    never ran out)."""

    name = "finite float range"

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class BinaryPath(click.Path):
    """A light binary to read: a file, or a codegen_dir, which stands for the model.mnlb it
    holds (as `mnrt dashboard` takes one): `mnrt run out/cg` after `mnrt compile
    --codegen-dir out/cg`, `mnrt diff cg_o1 cg_o3` of two compiles."""

    name = "binary"

    def __init__(self) -> None:
        super().__init__(path_type=Path)

    def convert(self, value, param, ctx):
        path = super().convert(value, param, ctx)
        if not os.path.isdir(path):  # False, not OSError, where no file can have the name
            return path
        if (path / "model.mnlb").is_file():
            return path / "model.mnlb"
        self.fail(
            f"{str(path)!r} is a directory without a model.mnlb (a codegen_dir holds one); "
            "give a light binary file",
            param,
            ctx,
        )
