"""`mnrt smi`: list, reset and clear emulated devices, like gpfn3-smi."""

from __future__ import annotations

from dataclasses import asdict

import click

from ..device import boards
from ..device.memory import Fill, pattern_width
from ..device.spec import MNCORE2
from ..format import strict_json


def _int_auto_base(value: str, option: str) -> int:
    try:
        return int(value, 0)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an integer (use 0x... for hex)", param_hint=option
        ) from None


def _typed_width(pattern: str) -> int | None:
    """The width a hex pattern's digits ask for, leading zeros included: the fewest bytes
    of a pattern width that hold them all (None for a pattern not in hex). `pattern` is one
    int() took, so a sign may lead; more than 16 digits fit no width, even as leading zeros
    (0x0000000000000000ff is not the 1-byte pattern 0xff)."""
    text = pattern.strip().lstrip("+-").lower().replace("_", "")
    if not text.startswith("0x"):
        return None
    digits = len(text) - 2
    if digits > 16:
        raise click.BadParameter(
            f"{pattern!r} has {digits} hex digits; a pattern has at most 16 (64 bits)",
            param_hint="--pattern",
        )
    return pattern_width((1 << (4 * digits)) - 1)


@click.group()
def smi() -> None:
    """Emulated device management (list, reset, clear)."""


@smi.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def list_cmd(as_json: bool) -> None:
    """List devices as 'INDEX: NAME', each with the host PCIe switch it sits behind and,
    where `mnrt smi clear` left it one, what its unwritten DRAM holds (captures record that
    fill as data), then the link between them. With --json, a row per device, its `link`
    the figures of the link that joins it to the others."""
    infos = boards.list_devices()
    link = MNCORE2.link
    if as_json:
        figures = link.describe()
        click.echo(strict_json.dumps([{**asdict(i), "link": figures} for i in infos], indent=1))
        return
    for info in infos:
        fill = f"  unwritten DRAM: {info.fill}" if info.fill != "zero" else ""
        click.echo(f"{info}  switch {info.switch}{fill}")
    latency = link.describe()["latency_s"]
    same = latency["same_switch"]
    click.echo(
        f"link: {link.name}, {link.bandwidth / 1e9:.1f} GB/s per direction "
        f"({link.published_bandwidth / 1e9:.0f} GB/s raw), {link.boards_per_switch} boards "
        "per host switch; copy latency "
        + (f"{same * 1e6:.2f} us on one switch, " if same is not None else "")
        + f"{latency['across_switches'] * 1e6:.2f} us across switches"
    )


@smi.command()
@click.argument("indices", nargs=-1, type=int)
@click.option("--all", "all_", is_flag=True, help="Reset every device.")
def reset(indices: tuple[int, ...], all_: bool) -> None:
    """Reset devices to power-on state (unwritten DRAM reads as zero).

    --all also forgets the state of devices beyond MNRT_DEVICE_COUNT, and a corrupt state
    file. A device open in a running process keeps its contents until it is opened again."""
    if all_ == bool(indices):
        raise click.UsageError("give device indices or --all (not both)")
    if all_:
        targets = range(boards.device_count())
        boards.reset_all()
    else:
        targets = [boards.check_index(i) for i in indices]
        for i in targets:
            boards.save_fill(i, Fill())
    for i in targets:
        click.echo(f"{i}: {boards.device_name(i)} reset")


@smi.command()
@click.argument("index", type=int)
@click.option("--zero", is_flag=True, help="Fill DRAM with zeros.")
@click.option(
    "--pattern",
    type=str,
    default=None,
    help="Fill with a repeated little-endian pattern, e.g. 0xdeadbeef; in hex, the digits "
    "typed set its width (0x000000ff repeats every 4 bytes, 0xff every byte).",
)
@click.option("--seed", type=str, default=None, help="Fill with noise from this seed.")
def clear(index: int, zero: bool, pattern: str | None, seed: str | None) -> None:
    """Fill a device's DRAM with zeros, a pattern or seeded noise.

    The fill lasts until the next clear or reset and applies whenever the device is opened;
    a device open in a running process keeps its contents until it is opened again."""
    if sum((zero, pattern is not None, seed is not None)) != 1:
        raise click.UsageError("give exactly one of --zero, --pattern, --seed")
    fill = Fill.of(
        zero=zero,
        pattern=None if pattern is None else _int_auto_base(pattern, "--pattern"),
        seed=None if seed is None else _int_auto_base(seed, "--seed"),
        width=None if pattern is None else _typed_width(pattern),
    )
    boards.save_fill(boards.check_index(index), fill)
    click.echo(f"{index}: {boards.device_name(index)} cleared ({fill.describe()})")
