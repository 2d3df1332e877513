"""Compile options with the MN-Core MLSDK names, and their validation.

`option_json` names a preset (O0..O4, debug: JSON files shipped in `presets/`) or a JSON
file `{"envs": {...}, "args": ["--float_dtype=half", ...], "name": ...}`; options given
explicitly override the file's. Unknown options are errors that list the valid ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError, MnrtError
from ..format.files import open_regular, parse_json
from .layout import parse as parse_layout
from .layout_planners import ALIASES, PLANNERS
from .mpmd.options import parse_assignment, parse_mpmd
from .placement import on_chip_bytes
from .schedulers import DEFAULT as DEFAULT_SCHEDULER
from .schedulers import SCHEDULERS
from .schedulers.auto_recompute_sa import MAX_STEPS

PRESETS = Path(__file__).with_name("presets")
_MAX_OPTION_JSON = 1 << 20  # bytes; presets are a few hundred


class OptionError(InvalidArgumentError):
    """An unknown compile option or an invalid value for one."""


def _check_sram_budget(value: int, what: str) -> None:
    """A budget beyond the chip's local memory would model on-chip storage that does not
    exist (and price its traffic as on-chip): refuse it instead of pretending."""
    limit = on_chip_bytes()
    if value > limit:
        raise InvalidArgumentError(
            f"{what}={value} is more than the chip's {limit} bytes of PE local memory; "
            "give at most that, or 0 for all of it"
        )


DEFAULT_ANNEAL_STEPS = 1000
MAX_ANNEAL_STEPS = MAX_STEPS  # each step re-measures the whole schedule


def _check_anneal_steps(value: int, what: str) -> None:
    """Every annealing step walks the whole schedule, so an unbounded count is a compile that
    never ends: refuse it up front."""
    if value > MAX_ANNEAL_STEPS:
        raise InvalidArgumentError(
            f"{what}={value}: give at most {MAX_ANNEAL_STEPS} annealing steps (the default, "
            f"{DEFAULT_ANNEAL_STEPS}, already finds most of what annealing can)"
        )


def _check_effort(value: int, what: str) -> None:
    if value > MAX_MAPPING_EFFORT:
        raise InvalidArgumentError(f"{what}={value}: efforts are 0..{MAX_MAPPING_EFFORT}")


MAX_MAPPING_EFFORT = 4


@dataclass(frozen=True)
class Option:
    default: Any
    doc: str
    choices: tuple | None = None
    kind: type = str
    parse: Callable[..., Any] | None = None  # checks a non-empty value (raises if bad)


OPTIONS: dict[str, Option] = {
    "option_json": Option("O1", "preset name (O0..O4, debug) or path of an option JSON file"),
    "float_dtype": Option(
        "float",
        "mixed: GEMM/conv operands and results in half, the rest float; or half/float/double",
        ("mixed", "half", "float", "double"),
    ),
    "scheduler": Option(
        DEFAULT_SCHEDULER,
        "node order and where each value lives (mnrt/compiler/schedulers): always_from_dram "
        "(no on-chip reuse), reuse_consecutive (a result read right after it is made stays "
        "on chip), spill_opt (the on-chip set of least modelled time), auto_recompute_sa "
        "(annealing over order, spills and recomputation); in_order, min_memory, anneal "
        "(an order, then greedy placement)",
        tuple(SCHEDULERS),
    ),
    "layout_planner": Option(
        "lpz",
        "where layouts switch: lpz (only where a consumer needs another, or through DRAM "
        "when cheaper), bidi (lpz choosing layouts backwards too), legacy (one canonical "
        "layout; row_major is its older name)",
        (*PLANNERS, *ALIASES),
    ),
    "sram_budget": Option(
        0,
        "bytes of PE local memory temporaries may stay in (0: all of it)",
        kind=int,
        parse=_check_sram_budget,
    ),
    "sa_expected_run_iters": Option(
        DEFAULT_ANNEAL_STEPS,
        "simulated-annealing steps of scheduler=anneal and auto_recompute_sa (the env "
        "CODEGEN_SA_STEPS overrides it; CODEGEN_NUM_SA_THREADS runs that many seeded chains)",
        kind=int,
        parse=_check_anneal_steps,
    ),
    "mapping_effort": Option(
        1,
        "how hard the mapper searches GEMM/conv mappings: 0 none (a fixed 4x4-block "
        "mapping), 1 a few balanced ones, 2 every PE grid and GRF block, 3-4 also LM "
        "accumulators and operands resident in L2BM",
        kind=int,
        parse=_check_effort,
    ),
    "out_onnx": Option("", "also write the optimised graph here as ONNX"),
    "layout_spec": Option(
        "",
        "MN-Core layout of activations of its shape, e.g. ((8_L2B:1, 4:2, 8_L1B:1), (2:1, "
        "4_PE:1, 2_W:1))",
        parse=parse_layout,
    ),
    "gemm_layout_spec": Option(
        "", "MN-Core layout of GEMM/conv operands of its shape", parse=parse_layout
    ),
    "mpmd": Option(
        "",
        'pipeline over devices: {"devices": [0, 1, 2, 3], "stages": 4, "microbatches": 8, '
        '"schedule": "gpipe" | "circular"} (a dict or its JSON text; empty: one device)',
        kind=dict,
        parse=parse_mpmd,
    ),
    "stage_assignment": Option(
        "",
        "{node-name prefix: stage} for an mpmd compile; other nodes' stages are inferred",
        kind=dict,
        parse=parse_assignment,
    ),
}


def _bad(name: str) -> OptionError:
    return OptionError(f"unknown compile option {name!r}; valid options are: {', '.join(OPTIONS)}")


def _check(name: str, value: Any) -> Any:
    spec = OPTIONS.get(name)
    if spec is None:
        raise _bad(name)
    if spec.kind is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise OptionError(f"option {name}={value!r}: expected an integer")
        try:
            value = int(value)
        except (TypeError, ValueError):
            raise OptionError(f"option {name}={value!r}: expected an integer") from None
        if value < 0:
            raise OptionError(f"option {name}={value}: must not be negative")
    elif spec.kind is dict and isinstance(value, Mapping):
        try:  # its own keys, before JSON makes them strings
            spec.parse(value, what=f"option {name}") if value else None
        except InvalidArgumentError as e:
            raise OptionError(str(e)) from None
        value = json.dumps(dict(value), sort_keys=True) if value else ""
    elif spec.kind is dict and not isinstance(value, str):
        raise OptionError(f"option {name}={value!r}: expected a dict or its JSON text")
    elif not isinstance(value, str):
        raise OptionError(f"option {name}={value!r}: expected a string")
    if spec.choices is not None and value not in spec.choices:
        raise OptionError(f"option {name}={value!r}: valid values are {', '.join(spec.choices)}")
    if spec.parse is not None and value:
        try:
            spec.parse(value, what=f"option {name}")
        except InvalidArgumentError as e:
            raise OptionError(str(e)) from None
    return value


def _load_option_json(ref: str) -> tuple[dict[str, Any], dict[str, str], str]:
    """(options from its args, its envs, its name) for a preset name or a JSON file path."""
    presets = {p.stem: p for p in PRESETS.glob("*.json")}
    path = presets.get(ref, Path(ref))
    try:
        os.stat(path)
    except (OSError, ValueError):  # not there, a name too long, a NUL...
        raise OptionError(
            f"option_json {ref!r} is neither a preset ({', '.join(sorted(presets))}) nor a "
            "readable file"
        ) from None
    try:
        with open_regular(path, "an option_json file") as f:  # not a FIFO, not /dev/zero
            text = f.read(_MAX_OPTION_JSON + 1)
    except (MnrtError, OSError) as e:
        raise OptionError(f"option_json {ref!r}: {e}") from None
    if len(text) > _MAX_OPTION_JSON:
        raise OptionError(
            f"option_json {ref!r} is larger than {_MAX_OPTION_JSON} bytes; it should be a "
            "small JSON object of envs, args and a name"
        )
    try:
        doc = parse_json(text)
    except ValueError as e:
        raise OptionError(f"option_json {ref!r} is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise OptionError(f"option_json {ref!r} must hold a JSON object")
    options: dict[str, Any] = {}
    args = doc.get("args", [])
    if not isinstance(args, list):
        raise OptionError(f'option_json {ref!r}: args must be a list of "--name=value" strings')
    for arg in args:
        if not isinstance(arg, str) or not arg.startswith("--") or "=" not in arg:
            raise OptionError(f"option_json {ref!r}: argument {arg!r} is not --name=value")
        name, value = arg[2:].split("=", 1)
        if name == "option_json":
            continue  # nested option files are ignored, as in MLSDK
        options[name] = _check(name, value)
    envs = doc.get("envs", {})
    if not isinstance(envs, dict):
        raise OptionError(f"option_json {ref!r}: envs must be an object")
    return options, {str(k): str(v) for k, v in envs.items()}, str(doc.get("name", ref))


@dataclass(frozen=True)
class CompileOptions:
    """Resolved options: defaults, then the option_json file, then explicit options."""

    values: dict[str, Any]
    envs: dict[str, str]
    name: str

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def to_json(self) -> dict:
        """An option_json document that reproduces this compile."""
        args = [f"--{k}={v}" for k, v in self.values.items() if k != "option_json"]
        return {"name": self.name, "envs": self.envs, "args": args}


def resolve(options: Mapping[str, Any] | None) -> CompileOptions:
    if options is not None and not isinstance(options, Mapping):
        raise OptionError(
            f"options must be a dict of option name -> value, not {type(options).__name__}"
        )
    explicit = dict(options or {})
    for name in explicit:
        if name not in OPTIONS:
            raise _bad(name)
    ref = _check("option_json", explicit.get("option_json", OPTIONS["option_json"].default))
    from_file, envs, name = _load_option_json(ref)
    values = {n: spec.default for n, spec in OPTIONS.items()}
    values.update(from_file)
    values.update({n: _check(n, v) for n, v in explicit.items()})
    values["option_json"] = ref
    return CompileOptions(values, envs, name)
