"""ONNX's operator suite run through mnrt (and onnxruntime, for comparison): the cases that
`onnx.backend.test.case.node` generates from the installed wheel, each compiled and run on
the emulated device and compared with the case's expected outputs, rtol and atol, dtype and
shape. mnrt compiles `from_onnx(model, inputs)` (example inputs fold what the model leaves
to them: symbolic dimensions, axes or shapes given as graph inputs), then runs that graph.
Shared by tests/compiler/test_onnx_node_suite.py and benchmarks/onnx_node_suite.py.

Every case gets one verdict:
- pass: every output matches; or, where a float32 case's expected values lie from the exact
  ones (ONNX's reference evaluator run in float64) by no more than rounding, the outputs
  match the exact ones (an inverse DFT's expected imaginary parts hold float32's noise);
- refused: an MnrtError at compile or run (the device cannot do it; acceptable), or a model
  whose precision no float_dtype computes in (NO_PRECISION: float16, bfloat16 in, float32
  with float64);
- wrong: it ran, but a value, shape or dtype differs (never acceptable);
- crash: any other exception (a bug in mnrt, never acceptable).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import pkgutil
import re
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import mnrt
from mnrt.compiler.onnx import names

VERDICTS = ("pass", "refused", "wrong", "crash")
# The one refusal that is the harness's: a model of IEEE float16 values, or of float32 and
# float64 ones, has no float_dtype that computes in its own precision (see float_dtype).
NO_PRECISION = (
    "no float_dtype computes in the model's precision (float16, bfloat16 in, or mixed): not run"
)


@dataclass
class Result:
    """One case's verdict; `detail` says why it is not a pass (an exception class and the
    first words of its message, or what differs)."""

    case: str
    op: str
    verdict: str
    detail: str = ""


@dataclass
class Tally:
    """Verdict counts per op and in total, and the reasons for refusals."""

    per_op: dict[str, Counter] = field(default_factory=dict)
    reasons: Counter = field(default_factory=Counter)

    def add(self, r: Result) -> None:
        self.per_op.setdefault(r.op, Counter())[r.verdict] += 1
        if r.verdict == "refused":
            self.reasons[r.detail] += 1

    def total(self, verdict: str) -> int:
        return sum(c[verdict] for c in self.per_op.values())


def case_modules() -> list[str]:
    """The modules of `onnx.backend.test.case.node` (one per op or op family), listed
    without importing them: importing one generates its cases."""
    import onnx
    import onnx.backend.test.case.node as node

    found = []
    for info in pkgutil.walk_packages(node.__path__, node.__name__ + "."):
        if info.ispkg or (not onnx.ONNX_ML and ".ai_onnx_ml" in info.name):
            continue
        found.append(info.name.removeprefix(node.__name__ + "."))
    return sorted(found)


@functools.cache
def module_cases(module: str) -> tuple[Any, ...]:
    """The node cases that importing one case module generates with the wheel's `expect`
    machinery (the wheel ships no data for them). Cached: a module generates once."""
    import onnx.backend.test.case.node as node

    name = f"{node.__name__}.{module}"
    before = len(node._NodeTestCases)
    # Another test may have run the wheel's collect_testcases(op) first, which leaves its
    # op filter set (every other module would then generate nothing) and the names of the
    # cases it generated taken (generating them again would raise).
    names, node._TargetOpType = dict(node._existing_names), None
    node._existing_names.clear()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if name in sys.modules:  # imported before (another test): generate its cases again
                importlib.reload(sys.modules[name])
            else:
                importlib.import_module(name)
    finally:
        node._existing_names.update(names)
    return tuple(c for c in node._NodeTestCases[before:] if c.kind == "node")


def node_cases() -> list[Any]:
    """Every node case of the installed onnx wheel (about 1,900 in onnx 1.23)."""
    return [c for m in case_modules() for c in module_cases(m)]


@functools.cache
def _op_names() -> dict[str, str]:
    """Every ONNX op name, by its lower-case spelling without underscores."""
    from onnx import defs

    return {s.name.lower(): s.name for s in defs.get_all_schemas_with_history()}


def op_of(case: Any) -> str:
    """The op a case tests: its model's only node, or for a model of several nodes (a
    function expanded into its body, a case that builds its inputs) the longest op name
    the case's name starts with; "(expanded)" marks a function's expansion."""
    nodes = case.model.graph.node
    key = case.name.removeprefix("test_").replace("_", "").lower()
    named = [op for low, op in _op_names().items() if key.startswith(low)]
    if len(nodes) == 1:
        op = nodes[0].op_type
    else:
        op = max(named, key=len) if named else nodes[-1].op_type
    return f"{op} (expanded)" if "_expanded" in case.name else op


def _first_words(e: BaseException, words: int = 10) -> str:
    """The class of an exception and the first words of its reason: for a model error that
    lists problems, of the first one, as "(Op): reason" without the node's name."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = lines[1] if len(lines) > 1 else lines[0] if lines else ""
    m = re.match(r"^.*? (\(\w+\): .*)$", text)
    text = m.group(1) if m else text
    text = re.sub(r"'[^']*'", "'…'", text)  # value names differ per case, the reason not
    return f"{type(e).__name__}: {' '.join(text.split()[:words])}"


def float_dtype(model: Any) -> str | None:
    """The compile precision that computes in the model's own: double for float64 models,
    float for float32 or integer ones. None where no float_dtype does: IEEE float16 (float
    would answer in float32, half is MN-Core's 1-6-9 format), float32 and float64 mixed
    (float_dtype puts every float value in one precision), or bfloat16 data in: mnrt keeps
    bfloat16 and rounds at each kernel's output, the reference that made the expected
    values at each of its numpy steps, and the cases' rtol (1e-3) is finer than bfloat16
    resolves (their attention outputs are a step or two apart, mnrt's the nearer to the
    exact values; test_onnx_frontend runs bfloat16 inputs at bfloat16's tolerance)."""
    graph = model.graph
    elem = {v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]}
    floats = {e.numpy for e in names.ELEM_TYPES if e.code in elem and e.numpy}
    floats &= {"float16", "float32", "float64"}
    bf16_in = any(v.type.tensor_type.elem_type == names.BY_NUMPY["bfloat16"].code
                  for v in graph.input)  # fmt: skip
    if "float16" in floats or len(floats) > 1 or bf16_in:
        return None
    return "double" if floats == {"float64"} else "float"


def expected_dtype(dtype: np.dtype) -> np.dtype | None:
    """The dtype mnrt returns for an ONNX output of `dtype`: the host dtype of the device
    dtype that names.ELEM_TYPES says holds it (int64 as int64; bfloat16, which numpy lacks,
    as float32 values); None where no device dtype does."""
    e = names.BY_NUMPY.get(np.dtype(dtype).name)
    device = names.device_dtype(e.code) if e is not None else None
    return None if device is None else device.read_dtype


def compare(got: np.ndarray, want: Any, rtol: float, atol: float,
            exact_dtype: bool) -> str | None:  # fmt: skip
    """What differs between an output and its expected value, or None: dtype, shape, then
    values as |got - want| <= atol + rtol * |want| (NaN matches NaN; integers and bools
    exactly). The dtype must be the expected one, or without `exact_dtype` (mnrt) what
    `expected_dtype` says the device holds it as."""
    if isinstance(want, np.generic):
        want = np.asarray(want)
    if not isinstance(want, np.ndarray):
        return f"expected a {type(want).__name__}, got an array"
    got = np.asarray(got)
    target = want.dtype if exact_dtype else expected_dtype(want.dtype)
    if got.dtype != target:
        return f"dtype {got.dtype}, expected {want.dtype} (as {target})"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "biuUSO" or got.size == 0:
        ok = np.array_equal(got, want.astype(got.dtype)) if want.dtype.kind in "biu" else \
            np.array_equal(got, want)  # fmt: skip
        return None if ok else f"values differ at {int(np.sum(got != want))} element(s)"
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~((np.abs(g - w) <= atol + rtol * np.abs(w)) | (np.isnan(g) & np.isnan(w))
                | (g == w))  # fmt: skip
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return (
            f"{int(bad.sum())} of {bad.size} value(s) differ beyond rtol {rtol} atol {atol} "
            f"(first at flat index {i}: got {g.flat[i]!r}, expected {w.flat[i]!r})"
        )
    return None


def array(value: Any) -> Any:
    """A case's input or expected output as numpy: some cases give TensorProtos (bfloat16,
    float8 and 4-bit types that numpy has no dtype for become ml_dtypes arrays)."""
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else value


def case_inputs(case: Any, data: list[Any]) -> dict[str, Any]:
    """The graph inputs a data set feeds (every input no initializer fills), by name."""
    inits = {i.name for i in case.model.graph.initializer}
    names_ = [i.name for i in case.model.graph.input if i.name not in inits]
    return dict(zip(names_, (array(d) for d in data)))


def _verdict_of_outputs(case: Any, data: list[Any], outputs: list[Any], expected: list[Any],
                        exact_dtype: bool) -> str | None:  # fmt: skip
    if len(outputs) != len(expected):
        return f"{len(outputs)} output(s), expected {len(expected)}"
    wants = [array(w) for w in expected]
    diffs = [compare(g, w, case.rtol, case.atol, exact_dtype) for g, w in zip(outputs, wants)]
    i = next((i for i, d in enumerate(diffs) if d is not None), None)
    if i is None:
        return None
    if not all(isinstance(w, np.ndarray) and w.dtype == np.float32 for w in wants):
        return f"output {i}: {diffs[i]}"
    exact = _exact_outputs(case, data)
    if exact is not None and all(
        _rounded_from(w, x) and compare(g, x.astype(w.dtype), case.rtol, case.atol,
                                        exact_dtype) is None
        for g, w, x in zip(outputs, wants, exact)
    ):  # fmt: skip
        return None
    return f"output {i}: {diffs[i]}"


# How far a case's expected float values may lie from the exact ones and still count as
# their rounding (in units of the dtype's epsilon, times the output's largest magnitude).
_ROUNDING_EPS = 8


def _exact_outputs(case: Any, data: list[Any]) -> list[np.ndarray] | None:
    """The case's outputs as ONNX's reference evaluator computes them from its float inputs
    in float64, or None where it cannot. Some cases' expected values carry the rounding of
    the float32 arithmetic that made them (an inverse DFT's imaginary parts of 2e-7 where
    the exact ones are 1e-15), beyond the case's own atol of 1e-7."""
    from onnx.reference import ReferenceEvaluator

    feeds = case_inputs(case, data)
    wide = {n: v.astype(np.float64) if getattr(v, "dtype", None) == np.float32 else v
            for n, v in feeds.items()}  # fmt: skip
    try:
        return [np.asarray(r) for r in ReferenceEvaluator(case.model).run(None, wide)]
    except Exception:
        return None


def _rounded_from(want: np.ndarray, exact: np.ndarray) -> bool:
    """Whether a float32 expected output differs from the exact one only as rounding does."""
    if exact.shape != want.shape or exact.dtype.kind != "f":
        return False
    scale = float(np.max(np.abs(exact), initial=0.0))
    err = np.abs(want.astype(np.float64) - exact)
    return bool(np.all(err <= _ROUNDING_EPS * np.finfo(np.float32).eps * scale))


def _compile(
    ctx: mnrt.Context, case: Any, feeds: dict[str, Any], precision: str, preset: str
) -> tuple:
    """The case's model compiled for these inputs, and the inputs it folded: from_onnx with
    example inputs makes those that ops need at import time (axes, pads, shapes) constants,
    so the compiled function no longer takes them."""
    from mnrt.compiler.onnx import from_onnx

    graph = from_onnx(case.model, feeds)
    options = {"float_dtype": precision, "option_json": preset}
    compiled = ctx.compile(graph, {n: feeds[n] for n in graph.inputs}, options=options)
    return compiled, [n for n in feeds if n not in graph.inputs]


def run_mnrt(case: Any, ctx: mnrt.Context, preset: str = "O1", mixed: bool = False) -> Result:
    """Compile the case's model with mnrt on `ctx` (one Context for every case: devices are
    few) at `preset` (and with `mixed`, float_dtype=mixed where it would be float) and run
    it on every data set; a data set that gives a folded input another value is compiled
    again for it."""
    op = op_of(case)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            precision = float_dtype(case.model)
            if mixed and precision == "float":
                precision = "mixed"
            if precision is None:
                return Result(case.name, op, "refused", NO_PRECISION)
            folded_from = case_inputs(case, case.data_sets[0][0])
            compiled, folded = _compile(ctx, case, folded_from, precision, preset)
            order = [o.name for o in case.model.graph.output]
            for data, expected in case.data_sets:
                feeds = case_inputs(case, data)
                if any(not np.array_equal(feeds[n], folded_from[n]) for n in folded):
                    folded_from = feeds
                    compiled, folded = _compile(ctx, case, feeds, precision, preset)
                got = compiled({n: feeds[n] for n in compiled.input_names})
                outputs = [got[n].cpu() for n in order]
                diff = _verdict_of_outputs(case, data, outputs, list(expected), False)
                if diff is not None:
                    return Result(case.name, op, "wrong", diff)
    except mnrt.MnrtError as e:
        return Result(case.name, op, "refused", _first_words(e))
    except Exception as e:  # a crash is the bug this harness exists to find, reported
        return Result(case.name, op, "crash", _first_words(e, 30))
    return Result(case.name, op, "pass")


def run_onnxruntime(case: Any) -> Result:
    """The same case under onnxruntime (CPU), compared the same way but with exact dtypes.
    Any exception of onnxruntime is a refusal: it rejects what it does not implement."""
    import onnxruntime as ort

    op = op_of(case)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            so = ort.SessionOptions()
            so.log_severity_level = 4
            sess = ort.InferenceSession(case.model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])  # fmt: skip
            for data, expected in case.data_sets:
                got = sess.run(None, case_inputs(case, data))
                diff = _verdict_of_outputs(case, data, got, list(expected), True)
                if diff is not None:
                    return Result(case.name, op, "wrong", diff)
    except Exception as e:
        return Result(case.name, op, "refused", _first_words(e))
    return Result(case.name, op, "pass")


@contextlib.contextmanager
def one_context() -> Iterator[mnrt.Context]:
    """The one compile Context that every case of a run shares, closed at the end."""
    with mnrt.Context(mnrt.MNDevice("mncore2:auto")) as ctx:
        yield ctx
