"""The compile cache (CacheOptions): a codegen_dir per model, options, input shapes and
mnrt code (a pipelined compile's: its optimised graph), stored whole with a checksum of
each file and loaded instead of compiling."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from .._version import __version__
from ..errors import InvalidArgumentError, MnrtError
from ..format import strict_json
from ..format.files import open_regular, parse_json
from ..user_warning import warn
from . import serialize
from .codegen import load, make_dir, write_graph
from .ir import Graph
from .options import CompileOptions

if TYPE_CHECKING:
    from .compiled import CompiledFunction


class CacheOptions:
    """Where compiled graphs are kept: compiling the same model with the same options and
    input shapes (with the same mnrt code) again loads the cached codegen_dir instead of
    compiling. An entry that cannot be loaded (truncated, say) is compiled again."""

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"CacheOptions takes a directory path, not {type(cache_dir).__name__}"
            )
        self.cache_dir = Path(cache_dir)

    def __repr__(self) -> str:
        return f"CacheOptions({str(self.cache_dir)!r})"


def cache_key(graph: Graph, opts: CompileOptions, inputs: Mapping[str, np.ndarray]) -> str:
    """The cache entry of a compile: the model (structure and weights), every resolved option
    (an option_json file's contents included), the input shapes, and the mnrt version and
    code whose passes and formats made the entry."""
    key = xxhash.xxh3_64(serialize.fingerprint(graph).encode())
    key.update(json.dumps(opts.to_json(), sort_keys=True).encode())
    key.update(repr(sorted((n, np.shape(a)) for n, a in inputs.items())).encode())
    key.update(f"mnrt {__version__} {_mnrt_code()}".encode())
    return key.hexdigest()


@functools.cache
def _mnrt_code() -> str:
    """`code_digest` of the installed mnrt package, once per process. The version alone
    does not tell two builds apart: an install from a branch, or a development checkout
    whose passes changed since it filled the cache, has the version of the last release,
    and its cache would hand back what the old passes compiled."""
    return code_digest(Path(__file__).resolve().parents[1])


def code_digest(package: Path) -> str:
    """xxh3-64 of a package's code: every Python source and JSON file under `package` (its
    presets), each by its path there and its bytes; bytecode caches are not its code. A file
    that cannot be read counts by its path alone (the digest still changes when it comes
    back)."""
    digest = xxhash.xxh3_64()
    for path in sorted(package.rglob("*")):
        if path.suffix not in (".py", ".json") or "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        try:
            body = path.read_bytes()
        except OSError:
            continue
        digest.update(len(body).to_bytes(8, "little") + body)
    return digest.hexdigest()


CHECKSUMS = "checksums.json"  # in a cache entry: file name -> xxh3-128 of its bytes


def _digest(path: Path) -> str:
    """xxh3-128 of a regular file (a FIFO or device planted in an entry is refused, not
    waited on or read forever)."""
    with open_regular(path, "a cache file") as f:
        return xxhash.xxh3_128_hexdigest(f.read())


def checksums_hold(entry: Path) -> bool:
    """Whether a cache entry holds exactly the files it was stored with, each as it was
    stored. A file that still parses but changed (a flipped digit in graph.json, an edited
    option.json) would otherwise load as a different program, silently; one added since is
    not what was stored either, and a listed name outside the entry is never read."""
    try:
        with open_regular(entry / CHECKSUMS, "a cache file") as f:
            listed = parse_json(f.read())
        return (
            isinstance(listed, dict)
            and set(listed) == {p.name for p in entry.iterdir()} - {CHECKSUMS}
            and {"graph.json", "graph.params.npz", "option.json", "inputs.npz"} <= set(listed)
            and all(_digest(entry / name) == want for name, want in listed.items())
        )
    except (OSError, ValueError, TypeError, MnrtError):
        return False


def stored_phases(entry: Path) -> list[dict]:
    """The phases of the compile that stored an entry (its report.json, which the entry's
    checksums cover), for the report of a compile that loads it: what that compile's
    scheduler and layout planner did is still what the loaded program is. The phases that
    are each compile's own (import, cache, the light binary, ONNX export) are left out,
    and each is marked `cached`. None of them when the report cannot be read."""
    try:
        with open_regular(entry / "report.json", "a cache file") as f:
            phases = parse_json(f.read())["phases"]
        own = {"import", "cache", "light binary", "onnx export"}
        return [{**p, "cached": True} for p in phases if p["name"] not in own]
    except (OSError, ValueError, TypeError, KeyError, MnrtError):
        return []


def store_cached(compiled: CompiledFunction, entry: Path, phases: list[dict]) -> None:
    """A single-device compile's entry: its codegen_dir (see `_store`)."""
    _store(
        entry, lambda staging: compiled.write_codegen_dir(staging, list(phases), "cache directory")
    )


def store_optimised(
    graph: Graph,
    opts: CompileOptions,
    inputs: Mapping[str, np.ndarray],
    entry: Path,
    phases: list[dict],
) -> None:
    """A pipelined compile's entry: its optimised graph, which `load_optimised` gives back
    to be split into stages again (cheap; the passes before are what a hit saves), its
    example run (`inputs`, each with a leading microbatch axis, as a codegen_dir holds
    them) and the phases that made it (see `_store`)."""

    def fill(staging: Path) -> None:
        make_dir(staging, "cache directory")
        write_graph(graph, opts, inputs, staging)
        (staging / "report.json").write_text(strict_json.dumps({"phases": phases}, indent=1))

    _store(entry, fill)


def load_optimised(entry: Path) -> Graph | None:
    """The optimised graph of a pipelined compile's entry; None where there is none or it
    cannot be trusted (as for `checksums_hold`): that compile runs its passes again."""
    if not entry.is_dir() or not checksums_hold(entry):
        return None
    try:
        return load(entry)[0]
    except MnrtError:
        return None


def _store(entry: Path, fill: Callable[[Path], None]) -> None:
    """Write a cache entry (`fill(folder)`) whole or not at all: into a private folder
    renamed into place, so that a compile killed midway, or another compiling the same key
    at the same time, never leaves a partial entry for a later compile to load. A read-only
    cache (one shared by a team, filled by a build job) still serves what it holds: a miss
    compiles, warns and stores nothing."""
    if entry.parent.is_dir() and not os.access(entry.parent, os.W_OK | os.X_OK):
        warn(
            f"cache directory {entry.parent} is not writable, so this compile was not "
            "stored; compiles of the same model and options will compile again",
        )
        return
    make_dir(entry.parent, "cache directory")
    staging = entry.parent / f".{entry.name}.{uuid.uuid4().hex}.tmp"
    try:
        fill(staging)
        checksums = {p.name: _digest(p) for p in sorted(staging.iterdir()) if p.is_file()}
        (staging / CHECKSUMS).write_text(json.dumps(checksums, indent=1))
        # Replace what is there: one that could not be loaded, or a valid one a concurrent
        # compile of the same key stored (the same program, so either will do). If such a
        # compile stores its entry between the removal and the rename, the rename fails
        # and that entry stays.
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:  # a file or link where the entry goes would block it for good
            with contextlib.suppress(OSError):
                entry.unlink()
        with contextlib.suppress(OSError):
            os.rename(staging, entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
