"""`mnrt demo` and `mnrt compile`: the compiler from the command line."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import click
import numpy as np

from .. import errors
from ..format import strict_json
from ..format.npy import load_npy
from .args import named_sources, pair


def _preset_options(command):
    """-O, --float-dtype and --option, which demo and compile share."""
    command = click.option(
        "--option",
        "option_specs",
        multiple=True,
        metavar="NAME=VALUE",
        help="Any compile option, e.g. scheduler=min_memory (wins over -O's preset).",
    )(command)
    command = click.option(
        "--float-dtype",
        default=None,
        metavar="D",
        help="Float precision, the compile option float_dtype (default: the preset's); an "
        "unknown one is refused with the list of valid ones.",
    )(command)
    return click.option(
        "-O",
        "preset",
        default="O1",
        show_default=True,
        callback=_preset_name,
        help="Option preset (O0..O4, debug; -O2, -O O2 and -OO2 are the same) or an option "
        "JSON file.",
    )(command)


def _preset_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """`-O2` reaches click as -O with the value '2' (as `-O 2` does): the digit names the
    preset O2, as a compiler's -O2 does. Other values (O2, debug, a file) pass unchanged."""
    from ..compiler.options import PRESETS

    if value.isdigit() and (PRESETS / f"O{value}.json").is_file():
        return f"O{value}"
    return value


def _check_writes_spare_reads(writes: dict[str, Any], read: dict[Any, str]) -> None:
    """Refuse, before compiling, a path the compile writes (`writes`: option -> path) that
    is a file it reads (`read`: path -> what it is): the user's file would be replaced."""
    files = {Path(p): what for p, what in read.items() if isinstance(p, (str, Path))}
    for option, path in writes.items():
        if not isinstance(path, (str, Path)) or not str(path) or not Path(path).exists():
            continue
        for source, what in files.items():
            if source.exists() and os.path.samefile(path, source):
                raise errors.InvalidArgumentError(
                    f"{option} {path} is {what}; write the compile's output elsewhere"
                )


def _options(preset: str, float_dtype: str | None, option_specs: tuple[str, ...]) -> dict:
    options = {"option_json": preset, **({"float_dtype": float_dtype} if float_dtype else {})}
    options.update(pair(s, "name=value, e.g. scheduler=min_memory") for s in option_specs)
    return options


@click.command()
@click.option(
    "--model",
    type=click.Choice(["mlp", "cnn", "transformer"]),
    default="transformer",
    show_default=True,
    help="Bundled model, written with the Python graph builder.",
)
@_preset_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Keep the light binary here (default: a temporary file).",
)
def demo(model, preset, float_dtype, option_specs, output) -> None:
    """Compile a bundled model, run it, capture it into a light binary and replay that."""
    from ..compiler import Context
    from ..compiler.models import MODELS
    from ..replay import replay

    builder, inputs = MODELS[model]()
    options = _options(preset, float_dtype, option_specs)
    with tempfile.TemporaryDirectory() as tmp, Context() as ctx:
        compiled = ctx.compile(builder, inputs, options=options)
        outputs = {k: v.cpu() for k, v in compiled(inputs).items()}
        path = output or Path(tmp) / f"{model}.mnlb"
        compiled.save_binary(path)
        report = replay(path)
        click.echo(
            f"compiled {model} ({len(compiled.lowered.program.kernels)} kernels, float_dtype="
            f"{compiled.options['float_dtype']}) in {ctx.last_compile_s * 1e3:.1f} ms; outputs "
            + ", ".join(f"{k} {list(v.shape)}" for k, v in outputs.items())
        )
        click.echo(f"light binary: {path if output else 'temporary'}; replay:")
        click.echo(report.summary())
    if not report.passed:
        sys.exit(errors.EXIT_GOLDEN_MISMATCH)


def _random_input(rng: np.random.Generator, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Example data for an input the user gave none for. Integer inputs are most often
    indices (Gather, embeddings), where only zero is sure to be in range, so they get zeros;
    float inputs get standard normal values."""
    if dtype.kind in "biu":
        return np.zeros(shape, dtype)
    return rng.standard_normal(shape).astype(dtype)


def _load_npy(name: str, source: str) -> np.ndarray:
    """One input's array from a .npy file, read as untrusted (see format/npy.py)."""
    try:
        return load_npy(source)
    except errors.MnrtError as e:
        raise errors.InvalidArgumentError(f"input {name}: {e}") from None


def _check_fits(name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Random data for an input the device could not hold would only exhaust host memory
    before the compiler said so: refuse it first."""
    from ..device.spec import MNCORE2

    nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    if nbytes > MNCORE2.dram_bytes:
        raise errors.OutOfMemoryError(
            f"input {name} of shape {tuple(shape)} needs {nbytes} bytes, more than the "
            f"device's {MNCORE2.dram_bytes} bytes of DRAM; give the model a smaller shape"
        )


@click.command(name="compile")
@click.argument("model", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Light binary to write.",
)
@_preset_options
@click.option("--codegen-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option(
    "--input",
    "input_specs",
    multiple=True,
    metavar="NAME=FILE.npy|random",
    help="An input's data; inputs not given are random (integer ones zeros: valid indices).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was compiled as JSON.")
@click.option(
    "--devices",
    type=click.IntRange(1),
    default=None,
    help="Pipeline the model over devices 0..N-1 (the compile option mpmd).",
)
@click.option(
    "--microbatches",
    type=click.IntRange(1),
    default=None,
    help="With --devices: microbatches per run (default: the number of devices). An "
    "--input file holds one microbatch's example (repeated for each) or every "
    "microbatch's input along a leading axis.",
)
@click.option(
    "--schedule",
    type=click.Choice(["gpipe", "circular", "1f1b"]),
    default=None,
    help="With --devices: the pipeline schedule (default gpipe; 1f1b needs a backward pass "
    "and is refused).",
)
@click.option(
    "--stages",
    type=click.IntRange(1),
    default=None,
    help="With --devices: pipeline stages (default: one per device; circular takes a "
    "multiple of the devices).",
)
@click.option(
    "--stage-assignment",
    "assignment_specs",
    multiple=True,
    metavar="PREFIX=STAGE",
    help="With --devices: nodes whose name starts with PREFIX run in STAGE (repeatable); "
    "the rest is inferred. Without any, stages are balanced by modelled cost.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Print each GEMM/conv's chosen mapping and the best alternatives the mapper turned "
    "down, with the resource or metric that ruled each out.",
)
def compile_cmd(
    model, output, preset, float_dtype, option_specs, codegen_dir, input_specs, as_json,
    devices, microbatches, schedule, stages, assignment_specs, explain,
):  # fmt: skip
    """Compile an ONNX model to a light binary: weights, program, inputs and goldens (the
    compiled program's own outputs, checked against onnxruntime or a float64 run)."""
    from ..compiler import Context
    from ..compiler.onnx import from_onnx, load_model

    if explain and devices is not None:
        raise errors.InvalidArgumentError(
            "--explain lists one device's mappings; compile without --devices to see them "
            "(a pipeline's stages use the same mapper)"
        )
    given = named_sources(input_specs, "--input", "name=file.npy or name=random")
    options = _options(preset, float_dtype, option_specs)
    options.update(_pipeline_options(devices, microbatches, schedule, stages, assignment_specs))
    read = {model: "the model being compiled", preset: f"the option_json file -O {preset}"}
    read.update((source, f"the file of --input {name}={source}") for name, source in given.items())
    _check_writes_spare_reads({"-o": output, "out_onnx": options.get("out_onnx")}, read)
    # The files first: they fix what the model leaves open (a symbolic dimension, the shape
    # an Expand or Reshape reads), and the model's other inputs are known only after that.
    inputs = {name: _load_npy(name, s) for name, s in given.items() if s != "random"}
    proto, runs = load_model(model), {}
    if devices is not None:  # inputs of every microbatch: the compile takes them as they are
        from ..compiler.mpmd.microbatches import split_microbatches
        from ..compiler.pipeline import declared_ranks

        count = microbatches or devices
        inputs, runs = split_microbatches(declared_ranks(proto), inputs, count)
    with warnings.catch_warnings():  # what it says, the compile below says again
        warnings.simplefilter("ignore")
        graph = from_onnx(proto, inputs)  # for the names and shapes of its other inputs
    unknown = sorted(n for n in given if n not in inputs and n not in graph.inputs)
    if unknown:
        raise errors.InvalidArgumentError(
            f"unknown input(s) {', '.join(unknown)}; "
            f"the model's inputs are {', '.join(graph.inputs)}"
        )
    rng = np.random.default_rng(0)
    for name in graph.inputs:
        if name not in inputs:
            v = graph.values[name]
            _check_fits(name, v.shape, v.dtype.read_dtype)
            inputs[name] = _random_input(rng, v.shape, np.dtype(v.dtype.read_dtype))
    with Context() as ctx:
        compiled = ctx.compile(model, inputs | runs, codegen_dir=codegen_dir, options=options)
        accuracy = compiled.save_binary_and_check(output)
        if devices is not None:
            _report_pipeline(compiled, model, output, ctx.last_compile_s, as_json, accuracy)
            compiled.close()
            return
    if explain:
        from ..compiler.map_graph import explain as explain_mappings

        click.echo(explain_mappings(compiled.graph, compiled.options["mapping_effort"]))
    if as_json:
        from ..format import LightBinary
        from ..replay.info import io_dict

        binary = LightBinary.load(output)
        doc = {
            "model": str(model),
            "output": str(output),
            "kernels": len(compiled.lowered.program.kernels),
            "float_dtype": compiled.options["float_dtype"],
            "compile_s": ctx.last_compile_s,
            "inputs": [io_dict(e) for e in binary.inputs],
            "outputs": [io_dict(e) for e in binary.outputs],
            "accuracy": accuracy,
        }
        click.echo(strict_json.dumps(doc, indent=1))
        return
    click.echo(
        f"{model} -> {output}: {len(compiled.lowered.program.kernels)} kernels, "
        f"float_dtype={compiled.options['float_dtype']}, compiled in {ctx.last_compile_s:.2f} s"
    )


def _pipeline_options(
    devices: int | None,
    microbatches: int | None,
    schedule: str | None,
    stages: int | None,
    assignment_specs: tuple[str, ...],
) -> dict:
    """The mpmd and stage_assignment options the pipeline flags give (none without
    --devices; the other flags alone are a usage error)."""
    if devices is None:
        given = [f for f, v in (("--microbatches", microbatches), ("--schedule", schedule),
                                ("--stages", stages), ("--stage-assignment", assignment_specs))
                 if v]  # fmt: skip
        if given:
            raise click.UsageError(f"{', '.join(given)} pipeline(s) the model: give --devices N")
        return {}
    mpmd = {"devices": list(range(devices)), "schedule": schedule or "gpipe"}
    if microbatches is not None:
        mpmd["microbatches"] = microbatches
    if stages is not None:
        mpmd["stages"] = stages
    options: dict = {"mpmd": mpmd}
    assignment = {}
    for spec in assignment_specs:
        prefix, stage = pair(spec, "PREFIX=STAGE, e.g. /layer0/=0")
        if not stage.isdigit():
            raise click.BadParameter(
                f"{spec!r}: STAGE is a number", param_hint="--stage-assignment"
            )
        assignment[prefix] = int(stage)
    if assignment:
        options["stage_assignment"] = assignment
    return options


def _report_pipeline(
    compiled, model, output, seconds: float, as_json: bool, accuracy: dict
) -> None:
    """What a pipelined compile made: its fragments, transfers, modelled timeline and
    accuracy against the reference."""
    timeline = compiled.timeline().to_dict()
    doc = {
        "model": str(model),
        "output": str(output),
        "mpmd": compiled.mpmd.to_json(),
        "fragments": [
            {"name": f.name, "stage": f.stage, "device": f.device, "ops": len(f.ops)}
            for f in compiled.fragments
        ],
        "transfers": len(compiled.transfers),
        "compile_s": seconds,
        "modelled": timeline,
        "accuracy": accuracy,
    }
    if as_json:
        click.echo(strict_json.dumps(doc, indent=1))
        return
    mpmd = compiled.mpmd
    click.echo(
        f"{model} -> {output}: {len(compiled.fragments)} fragments on {len(mpmd.devices)} "
        f"devices, {len(compiled.transfers)} transfers, {mpmd.schedule} x "
        f"{mpmd.microbatches} microbatches; modelled makespan per call (weights on the "
        f"devices) {timeline['makespan_s'] * 1e6:.1f} us, bubble "
        f"{timeline['bubble_fraction']:.3f}; "
        f"compiled in {seconds:.2f} s"
    )
