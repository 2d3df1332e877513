"""`mnrt run`: replay a binary and report."""

from __future__ import annotations

import io
import itertools
import re
import sys
from pathlib import Path
from typing import NoReturn

import click
import numpy as np

from .. import errors
from ..format import LightBinary, strict_json
from ..format.files import check_usable, write_atomically
from ..format.npy import load_npy
from ..replay import MAX_LOOPS, replay
from ..replay.io import families, header_check, stacked
from ..replay.placement import parse_device_map, place
from ..replay.plan import validate
from ..replay.report import error_document
from . import interrupt
from .args import BinaryPath, FiniteRange, device_index, named_sources


def loop_progress(total_loops: int):
    """What a replay calls after each loop: a Ctrl-C Python dropped is raised again there
    (see interrupt.py), and a multi-loop run on a terminal shows a progress bar."""
    if total_loops < 2 or not sys.stderr.isatty():
        return lambda done, total: interrupt.check()
    bar = click.progressbar(length=total_loops, label="replaying", file=sys.stderr)
    bar.__enter__()

    def step(done: int, total: int) -> None:
        bar.update(1)
        if done == total:
            bar.__exit__(None, None, None)
        interrupt.check()

    return step


def _file_name(name: str) -> str:
    """A buffer name (which the binary chose) as a file name: no separators, NULs or
    dot-only names, and short enough for any file system."""
    safe = re.sub(r"[^\w.#+=-]", "_", name)[:200]
    return safe if safe.strip(".") else f"_{safe}"


def _save_outputs(folder: Path, outputs: dict[str, np.ndarray]) -> None:
    """Each output as FOLDER/<name>.npy; a pipelined binary's microbatches (y#0, y#1, ...)
    also as one FOLDER/y.npy, as --input and --expected take them."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise errors.MnrtError(f"cannot save outputs in {folder}: {e.strerror}") from None
    used: set[str] = set()
    for name, array in {**outputs, **stacked(outputs)}.items():
        # Names that differ only in what _file_name replaces ("a/b", "a_b") get a suffix
        # rather than overwriting each other.
        stem = base = _file_name(name)
        for n in itertools.count(2):
            if stem.lower() not in used:  # lower: case-insensitive file systems too
                break
            stem = f"{base}~{n}"
        used.add(stem.lower())
        data = io.BytesIO()
        np.save(data, array, allow_pickle=False)
        write_atomically(folder / f"{stem}.npy", data.getbuffer())


def _check_outputs(
    file: Path,
    paths: dict[str, Path | None],
    folder: Path | None,
    reads: list[tuple[str, str]],
) -> None:
    """Every output place, before the replay: the binary itself or a file the run reads
    (`reads`: --input and --expected NAME=FILE), two outputs in one file, a missing
    directory or one where a file must go would otherwise be found only after the run, with
    some outputs written and the binary or an input perhaps overwritten."""
    given = {flag: path for flag, path in paths.items() if path is not None}
    if folder is not None:
        given["--save-outputs"] = folder
    seen: dict[Path, str] = {file.resolve(): "the binary being replayed"}
    seen.update((path, f"the file of {given}") for path, given in _files_read(reads).items())
    for flag, path in given.items():
        check_usable(path, f"{flag} ")
        where = path.resolve()
        if where in seen:
            raise errors.InvalidArgumentError(
                f"{flag} {path} is also {seen[where]}; give each output its own path"
            )
        seen[where] = flag
        if flag == "--save-outputs":
            if path.exists() and not path.is_dir():
                raise errors.InvalidArgumentError(
                    f"cannot save outputs in {path}: it is not a directory"
                )
            # the nearest that exists (mkdir makes the rest); / has no parents
            parent = next(p for p in (where, *where.parents) if p.exists())
        else:
            if path.is_dir():
                raise errors.InvalidArgumentError(
                    f"cannot write {path} ({flag}): it is a directory; give a file path"
                )
            parent = where.parent
        if not parent.is_dir():
            what = "save outputs in" if flag == "--save-outputs" else "write"
            raise errors.InvalidArgumentError(
                f"cannot {what} {path} ({flag}): {parent} is not a directory; give a path in "
                "an existing one"
            )


def _files_read(reads: list[tuple[str, str]]) -> dict[Path, str]:
    """The files of (flag, NAME=FILE) options, resolved, each with its option as given."""
    out = {}
    for flag, spec in reads:
        _, sep, source = spec.partition("=")
        if sep and source:
            out[Path(source).resolve()] = f"{flag} {spec}"
    return out


def _check_outputs_spare_inputs(
    file: Path, binary: LightBinary, folder: Path, specs: list[tuple[str, str]]
) -> None:
    """--save-outputs writes FOLDER/<output>.npy once the run is done: where that is a file
    the run reads (the binary, an --input or --expected NAME=FILE), the user's file would be
    replaced. Refused before the run."""
    read = {file.resolve(): f"the binary {file}", **_files_read(specs)}
    names = [out.name for out in binary.outputs]
    for name in [*names, *families(names)]:
        target = (folder / f"{_file_name(name)}.npy").resolve()
        if target in read:
            raise errors.InvalidArgumentError(
                f"--save-outputs {folder} would replace {read[target]} (a file this run "
                f"reads) with output '{name}'; save the outputs in another directory"
            )


def _arrays(binary: LightBinary, kind: str, specs: tuple[str, ...]) -> dict[str, np.ndarray]:
    """--input (kind "input") or --expected (kind "output") NAME=FILE.npy options, each file
    checked against the binary's buffer from its header before its data is read."""
    flag = "--input" if kind == "input" else "--expected"
    sources = named_sources(specs, flag, "name=file.npy")
    arrays = {}
    for name, source in sources.items():
        check = header_check(binary, kind, name)
        try:
            arrays[name] = load_npy(source, check)
        except errors.MnrtError as e:
            raise type(e)(f"{flag} {name}={source}: {e}") from None
    return arrays


def _failed(e: errors.MnrtError, file: Path, report_path: Path | None, as_json: bool) -> None:
    """A run stopped by an error still writes its --report (the report so far when the
    replay had begun, else what is known) and, with --json, prints it as its one document
    and exits with the error's code; otherwise the caller lets the error go on to the CLI's
    one-line handler."""
    if _failure_written(e, file, report_path, as_json):
        sys.exit(e.exit_code)


def _failure_written(
    e: errors.MnrtError, file: Path, report_path: Path | None, as_json: bool
) -> bool:
    """Write the failed run's --report; with --json print it too and say so (True)."""
    report = getattr(e, "report", None)
    doc = report.to_dict() if report is not None else error_document(e, str(file))
    text = strict_json.dumps(doc, indent=1)
    if report_path is not None:
        write_atomically(report_path, text.encode())
    if as_json:
        click.echo(text)
    return as_json


@click.command()
@click.argument("file", type=BinaryPath())
@click.option("--device", default="auto", show_default=True, help="Device index or 'auto'.")
@click.option(
    "--device-map",
    "device_map",
    metavar="L:D,...",
    help="Fold the binary's logical devices onto runner devices, e.g. 0:0,1:0,2:1,3:1 "
    "(every logical device placed; copies that land on one device run as local copies; "
    "with --mpi, only devices of one rank may share one).",
)
@click.option(
    "--devices",
    type=int,
    default=None,
    help="Fold the binary's logical devices onto this many runner devices, in blocks "
    "(with --mpi: in all, dealt to the ranks as the logical devices are).",
)
@click.option("--loops", type=click.IntRange(1, MAX_LOOPS), default=1, show_default=True)
@click.option(
    "--allow-no-goldens",
    is_flag=True,
    help="Exit 0 for a binary that records no golden (verdict NO GOLDENS); else exit 4.",
)
@click.option("--rtol", type=float, default=None, help="Override every check's rtol.")
@click.option("--atol", type=float, default=None, help="Override every check's atol.")
@click.option("--no-verify", is_flag=True, help="Run without comparing goldens.")
@click.option(
    "--input",
    "input_specs",
    multiple=True,
    metavar="NAME=FILE.npy",
    help="Replay with this array in place of what the binary wrote to input NAME (see "
    "`mnrt info`); the recorded goldens then no longer apply. A pipelined binary's "
    "microbatches NAME#0, NAME#1, ... take one array, microbatches along its first axis.",
)
@click.option(
    "--expected",
    "expected_specs",
    multiple=True,
    metavar="NAME=FILE.npy",
    help="Compare output NAME with this array (at the recorded check's tolerances, or "
    "--rtol/--atol; floats of any width for a float output); for microbatches NAME#0, "
    "NAME#1, ..., as for --input.",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report as JSON here (a failed run's too).",
)
@click.option(
    "--save-outputs",
    "--output-dir",
    "save_outputs",
    type=click.Path(file_okay=False, path_type=Path),
    help="Save every output (its last read) as DIR/<name>.npy.",
)
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a Perfetto trace of every loop here (open it at ui.perfetto.dev).",
)
@click.option(
    "--locate",
    is_flag=True,
    help="Compare every kernel's output with the fingerprints the capture recorded; name the "
    "first divergent and the first wrong kernel and save its inputs and outputs as .npy.",
)
@click.option(
    "--locate-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where --locate saves the kernel's arrays (default: FILE's name + '.locate' in the "
    "current directory).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--mpi",
    is_flag=True,
    help="Distributed replay under mpiexec (mpiexec -n N mnrt run --mpi FILE): each rank "
    "replays its block of the binary's logical devices, at most one rank per device; rank 0 "
    "writes the report and outputs; every rank exits with one code. Needs mnrt[mpi].",
)
@click.option(
    "--mpi-timeout",
    type=FiniteRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="With --mpi: end the job when a rank waits this long for another's message "
    "(default: no limit; a rank that fails or dies ends the job at once anyway).",
)
def run(
    file,
    device,
    device_map,
    devices,
    loops,
    allow_no_goldens,
    rtol,
    atol,
    no_verify,
    input_specs,
    expected_specs,
    report_path,
    save_outputs,
    profile_path,
    locate,
    locate_dir,
    as_json,
    mpi,
    mpi_timeout,
) -> None:
    """Replay FILE and verify it against its goldens, or run it on new inputs.

    Exit codes: 0 pass (or ran, not verified), 1 golden mismatch (or, with --locate, a
    kernel whose output is wrong), 2 invalid binary or usage, 3 device error, 4 no goldens
    to verify (0 with --allow-no-goldens), 130 interrupted."""
    if mpi_timeout is not None and not mpi:
        raise errors.InvalidArgumentError("--mpi-timeout applies to --mpi runs only")
    if locate and locate_dir is None:
        locate_dir = Path(f"{_file_name(file.name)}.locate")

    reads = [("--input", s) for s in input_specs] + [("--expected", s) for s in expected_specs]

    def check_outputs() -> None:
        paths = {"--report": report_path, "--profile": profile_path}
        _check_outputs(file, paths, save_outputs, reads)

    def prepare(transport=None) -> tuple[LightBinary, dict, dict, int | str, dict | None]:
        """Everything that can be refused before the replay (on every rank, with --mpi,
        the fold too: ranks replay in processes of their own)."""
        binary = LightBinary.load(file)
        if save_outputs is not None:
            _check_outputs_spare_inputs(file, binary, save_outputs, reads)
        first_device = device_index(device)
        placement = None if device_map is None else parse_device_map(device_map)
        if transport is not None and (placement is not None or devices is not None):
            place(validate(binary, blobs=False), first_device, placement, devices, transport)
        return (
            binary,
            _arrays(binary, "input", input_specs),
            _arrays(binary, "output", expected_specs),
            first_device,
            placement,
        )

    def execute(prepared, transport=None):
        binary, inputs, expected, first_device, placement = prepared
        return replay(
            binary,
            device=first_device,
            verify=not no_verify,
            loops=loops,
            rtol=rtol,
            atol=atol,
            progress=loop_progress(loops) if transport is None or transport.rank == 0 else None,
            profile=profile_path is not None,
            inputs=inputs if input_specs else None,
            expected=expected if expected_specs else None,
            device_map=placement,
            devices=devices,
            transport=transport,
            locate_dir=locate_dir,
        )

    def finish(report) -> int:
        """Write what was asked for, print the verdict; the exit code."""
        if report_path is not None:
            write_atomically(report_path, report.to_json().encode())
        if profile_path is not None:
            report.profile.save(profile_path)
        if save_outputs is not None:
            _save_outputs(save_outputs, report.outputs)
        click.echo(report.to_json() if as_json else report.summary())
        wrong = report.locate is not None and report.locate.first_wrong is not None
        if not report.passed or wrong:
            return errors.EXIT_GOLDEN_MISMATCH
        if report.no_goldens and not allow_no_goldens:
            return errors.EXIT_NO_GOLDENS
        return errors.EXIT_OK

    if mpi:
        _run_mpi(
            file,
            mpi_timeout,
            check_outputs,
            prepare,
            execute,
            finish,
            report_path,
            as_json,
            profile_path,
        )
    check_outputs()
    try:
        report = execute(prepare())
    except errors.MnrtError as e:
        partial = getattr(e, "profile", None)
        if profile_path is not None and partial is not None:
            partial.save(profile_path)  # up to the failure: where and after what it stopped
        _failed(e, file, report_path, as_json)
        raise
    sys.exit(finish(report))


def _run_mpi(
    file, timeout, check_outputs, prepare, execute, finish, report_path, as_json, profile_path
) -> NoReturn:
    """One rank of `mpiexec -n N mnrt run --mpi FILE` (see distributed.py for the rules):
    rank 0, which writes the outputs, checks where they go; with --profile every rank
    writes the trace of its own devices (rank 0 at the path given, rank r beside it)."""
    from . import distributed

    transport = distributed.open_mpi(timeout)
    unwritable: list[errors.MnrtError] = []

    def prepare_rank():
        if transport.rank == 0:
            try:
                check_outputs()
            except errors.MnrtError as e:
                unwritable.append(e)
                raise
        return prepare(transport)

    try:
        prepared = distributed.agree_to_start(transport, file, prepare_rank)
    except errors.MnrtError as e:  # rank 0: the job stops before the replay
        if not unwritable:  # (a report path that failed its check is not written)
            _failed(e, file, report_path, as_json)
        raise

    def reported(e: errors.MnrtError) -> bool:
        """A rank's failure mid-replay, before the job ends: rank 0 writes its --report
        (the report so far); with --json the failing rank prints its document."""
        if transport.rank == 0:
            return _failure_written(e, file, report_path, as_json)
        if as_json:
            doc = {"error": errors.error_dict(type(e).__name__, str(e), e.exit_code)}
            doc["error"]["rank"] = transport.rank
            click.echo(strict_json.dumps(doc, indent=1))
        return as_json

    def guarded(step):
        return distributed.replay_or_abort(transport, step, reported)

    report = guarded(lambda: execute(prepared, transport))
    if profile_path is not None and transport.rank != 0:
        own = distributed.rank_file(profile_path, transport.rank)
        guarded(lambda: report.profile.save(own))
    code = guarded(lambda: finish(report)) if transport.rank == 0 else 0
    distributed.finish(transport, code)
