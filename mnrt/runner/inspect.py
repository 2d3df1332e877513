"""`mnrt info`, `mnrt dump`, `mnrt verify`, `mnrt convert`: look inside binaries."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ..errors import InvalidArgumentError
from ..format import IDENTIFIER, LightBinary, jsonio, strict_json
from ..format.files import open_regular, write_atomically, write_with_folder
from ..replay.hazards import RACES_SHOWN, races
from ..replay.info import info as binary_info
from ..replay.io import describe
from ..replay.plan import validate
from .args import BinaryPath


def _gib(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@click.command()
@click.argument("file", type=BinaryPath())
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def info(file, as_json) -> None:
    """Summarise FILE: producer, version, commands, buffers, programs, payload sizes."""
    binary = LightBinary.load(file)
    d = binary_info(binary)
    if as_json:
        click.echo(strict_json.dumps(d, indent=1))
        return
    m, dev, copies = d["metadata"], d["device"], d["copies"]
    by_type = ", ".join(f"{k} {v}" for k, v in d["commands_by_type"].items())
    kernels = ", ".join(f"{k} {v}" for k, v in d["kernels_by_op"].items())
    runs, run = d["fingerprint_sample"]
    sample = f" (statistics over {runs} runs of {run})" if d["kernel_fingerprints"] else ""
    views = f"; {d['slot_views']} slot views" if d["slot_views"] else ""
    click.echo(
        f"{d['path']}: {_gib(d['file_bytes'])}, format {d['version']} (schema {d['schema_hash']})\n"
        f"producer:  {d['producer']} (mnrt {m.get('mnrt_version', '?')}, "
        f"python {m.get('python', '?')}, host {m.get('hostname', '?')})\n"
        f"device:    {dev.get('arch', '?')} x{dev.get('device_count', '?')} "
        f"(captured as {', '.join(map(str, d['devices'])) or 'none'}), "
        f"peak {_gib(d['peak_device_bytes'])} of device memory\n"
        f"commands:  {d['commands']} ({by_type})\n"
        f"buffers:   {d['buffers']} ({_gib(d['buffer_bytes'])})\n"
        f"programs:  {d['programs']} (kernels: {kernels or 'none'}{views}); "
        f"{d['kernel_fingerprints']} kernel output fingerprints{sample}\n"
        f"copies:    {copies['local']} on one device, {copies['cross_device']} between devices "
        f"({_gib(copies['cross_device_bytes'])}); events: {d['events']}\n"
        f"payload:   {d['blobs']} blobs; {_gib(d['payload_bytes_referenced'])} referenced, "
        f"{_gib(d['payload_bytes_unique'])} unique, {_gib(d['payload_bytes_stored'])} stored "
        f"(dedup {d['dedup_ratio']:.2f}x, zstd {d['compression_ratio']:.2f}x)"
    )
    derived = "" if d["io_recorded"] else " (derived from the commands: an older binary)"
    for kind, entries in (("inputs", binary.inputs), ("outputs", binary.outputs)):
        click.echo(f"{kind + ':':<10} {describe(entries)}{derived if entries else ''}")


@click.command()
@click.argument("file", type=BinaryPath())
@click.option(
    "--json", "as_json", is_flag=True, required=True, help="JSON on stdout (the only format)."
)
def dump(file, as_json) -> None:
    """Print FILE's header, commands and blob table as JSON (payloads left out)."""
    click.echo(strict_json.dumps(jsonio.describe(LightBinary.load(file)), indent=1))


@click.command()
@click.argument("file", type=BinaryPath())
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def verify(file, as_json) -> None:
    """Check FILE without running it: structure, version, ids, sizes, blob checksums, and
    races between its queues (listed; a racy binary is still valid, so exit 0)."""
    binary = LightBinary.load(file)
    plan = validate(binary)
    counts = {
        "commands": len(binary),
        "blobs": len(binary.blobs),
        "buffers": len(plan.buffers),
        "programs": len(plan.programs),
    }
    found = races(plan)
    if as_json:
        doc = {"ok": True, "path": str(file), **counts, "races": [r.to_dict() for r in found]}
        click.echo(strict_json.dumps(doc, indent=1))
        return
    click.echo(
        f"OK: {file}: " + ", ".join(f"{n} {w[:-1] if n == 1 else w}" for w, n in counts.items())
    )
    for race in found:
        click.echo(f"race: {race.describe(plan)}")
    if found:
        click.echo(
            f"{len(found)}{'+' if len(found) == RACES_SHOWN else ''} race(s): its results may "
            "differ from run to run; order each pair with an event (record it on the first "
            "command's queue after it, wait for it on the second's before it)"
        )


@click.command()
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--blob-files",
    is_flag=True,
    help="Binary to JSON: write blobs as files next to DEST instead of base64.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def convert(source, dest, blob_files, as_json) -> None:
    """Convert a binary to JSON or JSON to a binary (chosen by SOURCE's contents)."""
    if _same_file(source, dest):
        raise InvalidArgumentError(
            f"convert {source} {dest}: the source and the destination are the same file; "
            "give another destination"
        )
    with open_regular(source, "a light binary or its JSON form") as f:
        # A size-prefixed FlatBuffer: size, root offset, then the file identifier.
        head = f.read(12)
        text = None if head[8:12] == IDENTIFIER else head + f.read()
    if text is None:
        binary = LightBinary.load(source)
        if blob_files:
            blob_dir = dest.parent / f"{dest.stem}.blobs"
            if blob_dir.resolve() in source.resolve().parents:
                raise InvalidArgumentError(
                    f"convert --blob-files {source} {dest}: the source lies in {blob_dir}, "
                    "the folder the blob files replace; move it out or give another "
                    "destination"
                )

            def fill(staging: Path) -> bytes:
                doc = jsonio.to_json(binary, staging)
                doc["blob_dir"] = blob_dir.name
                return json.dumps(doc, indent=1).encode()

            write_with_folder(dest, blob_dir, fill)
        else:
            write_atomically(dest, json.dumps(jsonio.to_json(binary), indent=1).encode())
        _converted(source, dest, "json", len(binary), dest.stat().st_size, as_json)
        return
    if blob_files:
        raise InvalidArgumentError(
            "--blob-files applies to binary -> JSON only: a JSON document names its own blob "
            "files (blob_dir), which converting it back reads"
        )
    doc = jsonio.loads(text, source)
    base = jsonio.blob_base(doc, Path(source).parent)
    entries = doc.get("blobs") if isinstance(doc, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        name = entry.get("file") if isinstance(entry, dict) else None
        if isinstance(name, str) and _same_file(dest, base / name):
            raise InvalidArgumentError(
                f"convert {source} {dest}: the destination is one of the document's blob "
                "files; give another destination"
            )
    binary = jsonio.from_json(doc, base)
    binary.save(dest)
    _converted(source, dest, "binary", len(binary), binary.file_size, as_json)


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one existing file (a name the document made up, with a NUL
    say, names none)."""
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _converted(source: Path, dest: Path, to: str, commands: int, size: int, as_json: bool) -> None:
    if as_json:
        doc = {"source": str(source), "dest": str(dest), "to": to, "commands": commands}
        click.echo(strict_json.dumps({**doc, "bytes": size}, indent=1))
        return
    what = "JSON" if to == "json" else "binary"
    click.echo(f"{source} -> {dest} ({what}, {commands} commands, {size} bytes)")
