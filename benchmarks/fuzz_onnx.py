"""Fuzz of the ONNX import: mutate the models of ONNX's node cases and compile and run each
mutant; every one must compile and run, or fail with an MnrtError.

Seeds: the node cases the installed onnx wheel generates (tests/compiler/onnx_suite.py)
whose models have at most three nodes (--max-nodes; the expanded cases, functions'
bodies, have more) and compute in a precision some float_dtype gives. Each mutant gets one
or two mutations: an attribute set to an extreme or malformed value (ints of 0, -1, 2**31,
2**62; floats of NaN, infinity, 1e30; strings that are no mode or not UTF-8; an entry
dropped from or added to a list), an example input reshaped, emptied or filled with an
extreme integer, or a declaration made wrong (a graph input's dimension or element type,
an initializer's dimension or data type). Each mutant runs in a child process of its own
(fork), under an address-space limit (--rss-mib) and a deadline (--timeout): a child that
dies of a signal (ONNX's C++ shape inference did, on a few attribute values) is a crash,
as a Python exception other than an MnrtError is a traceback.

Printed: mutants tried; results and clean errors; tracebacks, crashes, hangs and host
memory exhausted (each must be 0; exit 1 otherwise), with the case and seed of each for a
rerun (--case, --seed). POSIX only (fork).

    pip install onnx
    python benchmarks/fuzz_onnx.py [--seconds 300] [--seed 1] [--timeout 20] [--rss-mib 4096]
                                   [--max-nodes 3] [--case NAME --seed S]
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import resource
import signal
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "compiler"))

import onnx_suite

# A child's exit status: how its mutant ended.
OUTCOMES = {0: "result", 1: "clean error", 2: "not mutated", 3: "traceback", 4: "host memory"}
MUST_BE_ZERO = ("traceback", "host memory", "crash", "hang")


def _mutate_attribute(rng: random.Random, model: Any) -> bool:
    from onnx import AttributeProto

    nodes = [n for n in model.graph.node if n.attribute]
    if not nodes:
        return False
    a = rng.choice(list(rng.choice(nodes).attribute))
    if a.type == AttributeProto.INT:
        a.i = rng.choice([-1, 0, 1, 2, 3, -7, 2**31, 2**62, -(2**62), 100_000])
    elif a.type == AttributeProto.INTS:
        how = rng.randrange(3)
        if how == 0 and a.ints:
            del a.ints[rng.randrange(len(a.ints))]
        elif how == 1 or not a.ints:
            a.ints.append(rng.choice([0, -1, 2**31, 5]))
        else:
            a.ints[rng.randrange(len(a.ints))] = rng.choice([0, -1, -5, 2**40, 7, 1_000_000])
    elif a.type == AttributeProto.FLOAT:
        a.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e30])
    elif a.type == AttributeProto.FLOATS:
        if a.floats:
            a.floats[rng.randrange(len(a.floats))] = rng.choice([float("nan"), -1.0, 0.0, 1e30])
        else:
            a.floats.append(float("nan"))
    elif a.type == AttributeProto.STRING:
        a.s = rng.choice([b"", b"bogus", b"NOTSET", b"SAME_UPPER", b"linear", b"\xff\xfe"])
    else:
        return False
    return True


def _mutate_input(rng: random.Random, feeds: dict[str, Any]) -> bool:
    arrays = [k for k, v in feeds.items() if isinstance(v, np.ndarray)]
    if not arrays:
        return False
    name = rng.choice(arrays)
    v = feeds[name]
    how = rng.randrange(4)
    if how == 0 and v.ndim:
        feeds[name] = v.reshape(-1)
    elif how == 1:
        feeds[name] = v[..., None]
    elif how == 2 and v.ndim:
        feeds[name] = v[..., :0]
    elif v.dtype.kind in "iu":
        info = np.iinfo(v.dtype)
        extreme = rng.choice([-1, 2**31 - 1, 10**6, -(2**31)])
        feeds[name] = np.full(v.shape, min(max(extreme, info.min), info.max), v.dtype)
    else:
        return False
    return True


def _mutate_declaration(rng: random.Random, model: Any) -> bool:
    """A declared graph input's dimension or element type, or an initializer's dimension or
    data type, made wrong."""
    graph = model.graph
    if graph.initializer and rng.random() < 0.5:
        tensor = rng.choice(list(graph.initializer))
        if tensor.dims and rng.random() < 0.7:
            tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice([0, -1, 7, 2**31, 2**40])
        else:
            tensor.data_type = rng.choice([0, 8, 16, 999])
        return True
    declared = [v for v in graph.input if v.type.HasField("tensor_type")]
    if not declared:
        return False
    tensor_type = rng.choice(declared).type.tensor_type
    dims = tensor_type.shape.dim
    if dims and rng.random() < 0.7:
        dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 7, 2**31, 2**40])
    else:
        tensor_type.elem_type = rng.choice([0, 8, 16, 999])
    return True


def mutant(case: Any, seed: int) -> tuple[Any, dict[str, Any]] | None:
    """The model and example inputs of `case` mutated as `seed` says; None if no mutation
    applied (a model without attributes, say)."""
    rng = random.Random(seed)
    model = copy.deepcopy(case.model)
    feeds = dict(onnx_suite.case_inputs(case, case.data_sets[0][0]))
    mutated = False
    for _ in range(rng.randint(1, 2)):
        kind = rng.random()
        if kind < 0.5:
            mutated |= _mutate_attribute(rng, model)
        elif kind < 0.8:
            mutated |= _mutate_input(rng, feeds)
        else:
            mutated |= _mutate_declaration(rng, model)
    return (model, feeds) if mutated else None


def _run(case: Any, seed: int) -> int:
    """Compile and run one mutant; the exit status that says how it ended."""
    import mnrt

    made = mutant(case, seed)
    if made is None:
        return 2
    model, feeds = made
    precision = onnx_suite.float_dtype(model)
    if precision is None:
        return 2
    ctx = mnrt.Context()
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = ctx.compile(model, feeds, options={"float_dtype": precision})
            for value in compiled({n: feeds[n] for n in compiled.input_names}).values():
                value.cpu()
        return 0
    except mnrt.MnrtError:
        return 1
    except MemoryError:
        return 4
    except Exception as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if "mnrt" in f.filename]
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        print(f"traceback: {case.name} seed {seed}: {type(e).__name__}: {e}"[:300] + where)
        return 3
    finally:
        ctx.close()


def _in_child(case: Any, seed: int, timeout: float, rss_mib: int) -> str:
    """How one mutant ended, run in a forked child: an outcome, "crash" or "hang"."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            limit = rss_mib << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # C++ assertions, numpy's noise
            code = _run(case, seed)
        finally:
            sys.stdout.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return "crash"
            return OUTCOMES.get(os.WEXITSTATUS(status), "traceback")
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang"
        time.sleep(0.002)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=20, help="seconds a mutant may take")
    parser.add_argument("--rss-mib", type=int, default=4096, help="a mutant's address space")
    parser.add_argument("--case", help="only this node case (with --seed: one mutant)")
    parser.add_argument("--max-nodes", type=int, default=3, help="largest seed model (nodes)")
    args = parser.parse_args()
    import mnrt.compiler.onnx  # noqa: F401  (imported once, before the children fork)

    cases = [c for c in onnx_suite.node_cases() if len(c.model.graph.node) <= args.max_nodes]
    if args.case:
        cases = [c for c in cases if c.name == args.case]
        if not cases:
            sys.exit(f"no node case {args.case} of at most {args.max_nodes} nodes")
    rng = random.Random(args.seed)
    counts: Counter = Counter()
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        case = rng.choice(cases)
        seed = args.seed if args.case else rng.randrange(1 << 30)
        outcome = _in_child(case, seed, args.timeout, args.rss_mib)
        counts[outcome] += 1
        if outcome in MUST_BE_ZERO:
            print(f"{outcome}: {case.name} --seed {seed}", flush=True)
        if args.case:
            break
    print(f"mutants tried:    {sum(counts.values())} in {time.monotonic() - start:.0f} s")
    for outcome in ("result", "clean error", "not mutated"):
        print(f"{outcome + ':':<17} {counts[outcome]}")
    for outcome in MUST_BE_ZERO:
        print(f"{outcome + ':':<17} {counts[outcome]}   (must be 0)")
    sys.exit(1 if any(counts[o] for o in MUST_BE_ZERO) else 0)


if __name__ == "__main__":
    main()
