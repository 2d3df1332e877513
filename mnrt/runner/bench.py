"""`mnrt bench`: replay timings, modelled device time and energy, and a performance gate."""

from __future__ import annotations

import math
import os
import stat
import sys
from pathlib import Path
from typing import Any

import click

from .. import errors
from ..format import IDENTIFIER, strict_json
from ..format.files import open_regular, parse_json
from ..replay import MAX_LOOPS, ReplayReport, replay
from ..replay.costs import kernel_costs, modelled_totals, regressions
from ..replay.placement import parse_device_map
from ..replay.report import check_dict
from .args import BinaryPath, FiniteRange, device_index
from .run import loop_progress


def _modelled(report: ReplayReport) -> dict:
    """What the gate compares: a replay's modelled totals and its kernels' costs."""
    kernels = kernel_costs(report.binary)
    return {**modelled_totals(report), "kernels": [k.to_dict() for k in kernels]}


# The most a --baseline JSON may hold: `mnrt bench --json` prints about 200 bytes a kernel
# run, so this is millions of them; a pipe that never ends is cut off here.
MAX_BASELINE_JSON = 256 << 20


def _baseline(path: Path, **placement: Any) -> dict:
    """The `modelled` part of an earlier `mnrt bench --json`, with every field the gate
    reads checked first: an edited or foreign file is a usage error, not a traceback or a
    verdict on nonsense (a negative time would make anything a regression). A light binary
    (another compile's, a codegen_dir's) instead is replayed once, on the same `placement`,
    for its modelled figures: they depend on nothing the host does."""
    try:
        # a file or a pipe (`--baseline <(mnrt bench A --json)`), never /dev/zero
        with open_regular(path, "a --baseline file", pipes=True) as f:
            head = f.read(12)  # a size-prefixed FlatBuffer: size, root offset, identifier
            binary = head[8:12] == IDENTIFIER
            if binary and not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise errors.InvalidArgumentError(
                    f"--baseline {path} is a light binary in a pipe; give its file, or the "
                    "JSON `mnrt bench --json` prints"
                )
            text = b"" if binary else head + f.read(MAX_BASELINE_JSON)
        if binary:
            return _modelled(replay(path, verify=False, **placement))
        if len(text) > MAX_BASELINE_JSON:
            raise errors.InvalidArgumentError(
                f"--baseline {path} holds more than {MAX_BASELINE_JSON} bytes, more "
                "than `mnrt bench --json` prints; give that JSON or a light binary"
            )
        doc = parse_json(text)
    except errors.InvalidArgumentError:
        raise
    except errors.InvalidBinaryError as e:
        raise errors.InvalidArgumentError(f"--baseline {path}: {e}") from None
    except errors.MnrtError as e:
        raise errors.InvalidArgumentError(f"cannot read --baseline {path}: {e}") from None
    except OSError as e:
        raise errors.InvalidArgumentError(f"cannot read --baseline {path}: {e.strerror}") from None
    except ValueError:  # not JSON, or not text
        doc = None
    modelled = doc.get("modelled") if isinstance(doc, dict) else None
    if isinstance(modelled, dict) and _amounts(modelled, ("makespan_s", "energy_j")):
        kernels = modelled.get("kernels", [])
        if isinstance(kernels, list) and all(_kernel(k) for k in kernels):
            return modelled
    raise errors.InvalidArgumentError(
        f"--baseline {path} is neither a light binary nor the JSON `mnrt bench FILE --json` "
        "prints (that needs "
        "modelled.makespan_s and modelled.energy_j, and modelled.kernels of program, "
        "program_kernel, op and time_s, and energy_j where given: non-negative finite amounts)"
    )


def _amounts(row: dict, names: tuple[str, ...]) -> bool:
    """Whether `row` holds each of `names` as a finite non-negative number."""
    return all(
        type(row.get(n)) in (int, float) and math.isfinite(row[n]) and row[n] >= 0 for n in names
    )


def _kernel(row: object) -> bool:
    """Whether `row` is a kernel of `mnrt bench --json`'s modelled.kernels, as far as the
    gate reads it (see costs.regressions)."""
    return (
        isinstance(row, dict)
        and isinstance(row.get("program"), str)
        and isinstance(row.get("op"), str)
        and type(row.get("program_kernel")) is int
        and _amounts(row, ("time_s", "energy_j") if "energy_j" in row else ("time_s",))
    )


_ADDED_SHOWN = 10  # added kernels named one by one; --json lists every one


def _named(k: dict) -> str:
    """A kernel run of bench's modelled.kernels, as the gate names it."""
    return (
        f"command {k['command']} program '{k['program']}' kernel {k['program_kernel']} '{k['op']}'"
    )


@click.command()
@click.argument("file", type=BinaryPath())
@click.option("--loops", type=click.IntRange(1, MAX_LOOPS), default=10, show_default=True)
@click.option("--device", default="auto", show_default=True, help="Device index or 'auto'.")
@click.option("--device-map", "device_map", metavar="L:D,...", help="As for mnrt run.")
@click.option("--devices", type=int, default=None, help="As for mnrt run.")
@click.option("--no-verify", is_flag=True, help="Do not compare goldens (exit 0 whatever).")
@click.option(
    "--baseline",
    type=BinaryPath(),
    help="An earlier `mnrt bench --json` of this binary, or another binary (or codegen_dir) "
    "to replay once for its figures: exit 1 if modelled device time or energy grew beyond "
    "--tolerance, naming the kernels that got slower and those the baseline has no "
    "counterpart of.",
)
@click.option(
    "--tolerance",
    type=FiniteRange(min=0.0),
    default=0.02,
    show_default=True,
    help="Growth allowed against --baseline (0.02: 2%).",
)
@click.option("--json", "as_json", is_flag=True, help="Print timings and figures as JSON.")
def bench(
    file, loops, device, device_map, devices, no_verify, baseline, tolerance, as_json
) -> None:
    """Steady-state replay time of FILE over N loops (load excluded), and its modelled
    device time (makespan) and energy, overall and per kernel. Goldens are checked after
    each loop, outside its time.

    Exit codes: 0 pass, 1 a golden failed or (with --baseline) modelled time or energy
    regressed, 2 invalid binary or usage, 3 device error."""
    placement = {
        "device": device_index(device),
        "device_map": None if device_map is None else parse_device_map(device_map),
        "devices": devices,
    }
    base = _baseline(baseline, **placement) if baseline is not None else None
    report = replay(
        file, verify=not no_verify, loops=loops, progress=loop_progress(loops), **placement
    )
    modelled = _modelled(report)
    kernels = modelled["kernels"]
    t = report.timings
    failed = [c for c in report.checks if not c.passed]
    regressed, slower, added = [], [], []
    if base is not None:
        regressed, slower, added = regressions(modelled, base, tolerance)
    if as_json:
        doc = {**t, "passed": report.passed, "verdict": report.verdict, "modelled": modelled}
        doc["failed_checks"] = [check_dict(c) for c in failed]
        if base is not None:
            doc["regression"] = {
                "tolerance": tolerance,
                "totals": regressed,
                "slower_kernels": slower,
                "added_kernels": added,
            }
        click.echo(strict_json.dumps(doc, indent=1))
    else:
        click.echo(
            f"{len(report.binary)} commands, {loops} loops: wall min "
            f"{t['wall_min_s'] * 1e3:.3f} ms, median {t['wall_median_s'] * 1e3:.3f} ms, max "
            f"{t['wall_max_s'] * 1e3:.3f} ms per loop; load {t['load_s'] * 1e3:.2f} ms; "
            f"modelled makespan {modelled['makespan_s'] * 1e6:.2f} us, energy "
            f"{modelled['energy_j'] * 1e3:.3f} mJ over {len(kernels)} kernel runs"
        )
        click.echo(f"fastest loop, host time by command: {report.host_breakdown()}")
        if not report.passed:
            click.echo(
                f"FAIL: {report.failed_loops} of {loops} loops failed their goldens: "
                + ", ".join(f"{c.name} ({c.message})" for c in failed)
            )
        if regressed:
            click.echo(f"REGRESSION beyond {tolerance:.1%}: " + "; ".join(regressed))
            for k in slower:
                click.echo(
                    f"  slower: {_named(k)}: {k['baseline_time_s'] * 1e6:.3f} us -> "
                    f"{k['time_s'] * 1e6:.3f} us"
                )
            for k in added[:_ADDED_SHOWN]:
                click.echo(f"  added: {_named(k)}: {k['time_s'] * 1e6:.3f} us, not in the baseline")
            if len(added) > _ADDED_SHOWN:
                rest = sum(k["time_s"] for k in added[_ADDED_SHOWN:])
                click.echo(
                    f"  added: {len(added) - _ADDED_SHOWN} more kernel runs not in the baseline, "
                    f"{rest * 1e6:.3f} us in all (--json lists them)"
                )
        elif base is not None:
            click.echo(f"no regression beyond {tolerance:.1%} against {baseline}")
    if not report.passed or regressed:
        sys.exit(errors.EXIT_GOLDEN_MISMATCH)
