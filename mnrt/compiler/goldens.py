"""Goldens of compiled binaries, and the compile's accuracy check.

A compiled binary's golden is the compiled program's own result on the recorded inputs,
read back in the capture that records the run: replayed on the same machine it matches
bit for bit (`mnrt run --rtol 0 --atol 0` passes), and each golden's tolerance comes from
the tolerance model (mnrt/device/tolerance.py) applied to the graph that produced the
value: the dtype of the value, the working precision and reduction length of every
kernel on its path, and the depth of that path. A golden therefore says "this binary
computes what the compile computed, up to host rounding differences", tightly enough that
one GEMM or convolution whose output is off by 1% fails it, at every float_dtype.

Besides each output, the binary checks what the kernel that computed the output read (a
reshape or cast in between only moves values) when that value is still in its buffer when
the program ends (lowering reuses dead buffers): a softmax,
a normalisation or a relu can hide an error in what it reads (a softmax of equal logits is
uniform whatever scale they have), so the logits of a classifier are checked too.

Whether the compiled result is accurate is a separate question, answered once at compile
time by `accuracy`: the outputs against the model's reference (onnxruntime for an ONNX
model when it is installed, else the graph run in float64) with the tolerance of the
compiled precision (`ACCURACY`); report.json records the verdict and a failure warns,
naming the output and its error.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..capture import compare_to_golden
from ..device.dtypes import DType
from ..device.kernels import TensorSpec, lookup
from ..device.numerics import HALF_MAN_BITS, HALF_MAX
from ..device.tolerance import golden_tolerance, kernel_errors, terms
from ..errors import InvalidArgumentError
from ..host import CommandQueue, observe
from ..host.golden import compare
from ..user_warning import warn
from .codegen import file_stamp
from .ir import INPUT, PARAM, Graph, Node, Value, value
from .passes import apply_float_dtype

# Accuracy tolerances (rtol, atol) against the model's reference, per float_dtype; atol is
# relative to each output's largest magnitude (`accuracy_tolerance`). Coarsest last.
ACCURACY = {
    "double": (1e-9, 1e-12),
    "float": (1e-4, 1e-5),
    "mixed": (3e-2, 1e-2),
    "half": (5e-2, 2e-2),
}


def accuracy_tolerance(float_dtype: str, expected: np.ndarray, dtype: DType) -> tuple[float, float]:
    """The accuracy tolerances of one output: `ACCURACY`'s, its atol relative to the
    output's largest finite magnitude. A reduced-precision result is off by a fraction of
    the size of what it sums, not of each element (an element near zero of a GEMM whose
    results are around 100 is off by about 100 * 2**-10), and a fixed atol would also pass
    any output that is all smaller than it (softmax probabilities). Never below the buffer
    dtype's own atol, so that an all-zero reference still allows that."""
    rtol, atol = ACCURACY[float_dtype]
    if not dtype.is_float:
        return rtol, atol
    values = np.abs(np.asarray(expected, np.float64))
    scale = float(np.max(values, where=np.isfinite(values), initial=0.0))
    return rtol, max(atol * scale, dtype.atol)


def value_errors(graph: Graph) -> dict[str, float]:
    """Every value's error bound under the tolerance model, relative to its scale: inputs
    and parameters are exact, each node adds its kernel's error to its inputs' largest."""
    errors = {n: 0.0 for n, v in graph.values.items() if v.role in (INPUT, PARAM)}

    def spec(name: str) -> TensorSpec:
        return TensorSpec(graph.values[name].shape, graph.values[name].dtype)

    for node in graph.nodes:
        kdef = lookup(node.op)
        outs = kernel_errors(
            kdef,
            [spec(n) for n in node.inputs],
            [spec(n) for n in node.outputs],
            kdef.check_attrs(node.attrs),
            [errors[n] for n in node.inputs],
        )
        errors.update(zip(node.outputs, outs))
    return errors


def _computing_node(graph: Graph, producers: dict[str, int], name: str) -> Node:
    """The node that computed a value, looking through kernels that only move values (a
    reshape or transpose of a softmax's result was computed by the softmax)."""
    node = graph.nodes[producers[name]]
    while node.inputs and node.inputs[0] in producers:
        kdef = lookup(node.op)
        specs = [TensorSpec(graph.values[n].shape, graph.values[n].dtype) for n in node.inputs]
        if terms(kdef, specs, kdef.check_attrs(node.attrs)) > 0:
            break
        node = graph.nodes[producers[node.inputs[0]]]
    return node


def _last_writers(graph: Any, bindings: Mapping[str, Any]) -> dict[int, str]:
    """id of each buffer -> the value last computed into it (a value that lies in another's
    buffer has none of its own: see views.py)."""
    return {id(bindings[o]): o for node in graph.nodes for o in node.outputs if o in bindings}


def checked_values(compiled: Any) -> list[str]:
    """The values a binary checks: the outputs, then each temporary that the kernel which
    computed an output read and that still holds its value when the program ends (no
    later kernel wrote its buffer)."""
    graph, bindings = compiled.graph, compiled.lowered.bindings
    last_writer = _last_writers(graph, bindings)
    producers = graph.producers()
    names = list(graph.outputs)
    for out in graph.outputs:
        for name in _computing_node(graph, producers, out).inputs:
            kept = name in bindings and last_writer.get(id(bindings[name])) == name
            if kept and name not in names and graph.values[name].role not in (INPUT, PARAM):
                names.append(name)
    return names


def record_goldens(
    compiled: Any, q: CommandQueue, goldens: Mapping[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """After a run of `compiled`: a golden check of each checked value with the model's
    tolerance, recorded by the running capture. The golden is what the run left in the
    value's buffer, or `goldens[name]` for the names it gives (to check a changed program
    against another one's results). Returns the values read."""
    errors = value_errors(compiled.graph)
    names = list(goldens) if goldens is not None else checked_values(compiled)
    results = {}
    for name in names:
        buf = compiled.lowered.bindings[name]
        with observe.unobserved():
            results[name] = q.enqueue_read_buffer(buf, blocking=True)
        golden = results[name] if goldens is None else goldens[name]
        rtol, atol = golden_tolerance(buf.dtype, errors[name], golden)
        compare_to_golden(q, buf, golden, rtol=rtol, atol=atol, name=name)
    return results


def scaled_copy(compiled: Any, node_index: int, factor: float) -> Any:
    """A copy of a compiled function whose node `node_index` has its (first) output scaled
    by `factor`, through a `mul` by a parameter inserted after it: a wrong result, as a
    miscompiled or corrupted kernel would give, to show that goldens catch it (check it
    with `record_goldens(copy, q, goldens=<the original's results>)`). The copy shares
    the original's values and parameter data and owns its device buffers."""
    graph = compiled.graph
    node = graph.nodes[node_index]
    out = node.outputs[0]
    raw, scale = f"{out}.unscaled", f"{out}.scale"
    shape, dtype = graph.values[out].shape, graph.values[out].dtype
    values = {**graph.values, raw: Value(raw, shape, dtype)}
    values[scale] = value(scale, (), dtype.name, PARAM, np.array(factor))
    before = Node(node.op, list(node.inputs), [raw, *node.outputs[1:]], node.attrs, node.name)
    after = Node("mul", [raw, scale], [out], {}, f"{node.name or node.op}.scale")
    nodes = [*graph.nodes[:node_index], before, after, *graph.nodes[node_index + 1 :]]
    copy = Graph(graph.name, values, nodes, list(graph.inputs), list(graph.outputs))
    return type(compiled)(compiled.ctx, copy, compiled.options, compiled.source,
                          compiled.example_inputs, share=False)  # fmt: skip


def reference(
    compiled: Any, inputs: Mapping[str, np.ndarray], function: type | None = None
) -> tuple[str, dict]:
    """The model's reference outputs and what computed them: onnxruntime for an ONNX model
    when it is installed (and no parameter is bound to a registered value, which an
    onnxruntime session cannot take), else the graph as imported run in double precision,
    with the current values of registered parameters, by a compiled function of class
    `function` (default: `compiled`'s own; a pipelined function's reference runs on one
    device)."""
    onnxruntime = _onnxruntime_for(compiled)
    if onnxruntime is not None:
        outputs = _onnxruntime(onnxruntime, compiled, inputs)
        if outputs is not None:
            return "onnxruntime", outputs
    if _off_device.active:
        raise _NeedsDevice
    graph = apply_float_dtype(compiled.source, "double")
    for name, proxy in compiled.shared.items():
        value = graph.values.get(name)
        if value is not None and value.role == PARAM and value.shape == proxy.shape:
            value.data = proxy.cpu()
    # An output that is an input or a parameter given back as is (a pipelined compile
    # takes one) is its own reference; a compiled function computes the others.
    given = {o: inputs[o] if graph.values[o].role == INPUT else graph.values[o].data
             for o in graph.outputs if graph.values[o].role in (INPUT, PARAM)}  # fmt: skip
    computed: dict = {}
    if len(given) < len(graph.outputs):
        rest = [o for o in graph.outputs if o not in given]
        graph = Graph(graph.name, graph.values, graph.nodes, list(graph.inputs), rest)
        # share=False: its parameters its own (in double), none bound to a registered value.
        ref = (function or type(compiled))(compiled.ctx, graph, compiled.options,
                                           compiled.source, inputs, share=False)  # fmt: skip
        with ref:
            computed = {k: v.cpu() for k, v in ref(inputs).items()}
    outputs = {
        o: np.asarray(given[o]) if o in given else computed[o] for o in compiled.source.outputs
    }
    return "float64 graph", outputs


def _onnxruntime_for(compiled: Any) -> Any:
    """The onnxruntime module when it computes `compiled`'s reference (see reference)."""
    if compiled.onnx_model is None or compiled.shared:
        return None
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


class _OffDevice(threading.local):
    active = False  # this thread computes a reference while the device records a binary


_off_device = _OffDevice()


class _NeedsDevice(Exception):
    """The reference computed off the device found it needs the device after all."""


class PendingReference:
    """`reference(compiled, inputs)` for a compile that records a binary meanwhile. A
    reference from onnxruntime needs no device: it runs on a thread of its own from
    `start()`, which the compile calls once its run on the device is done (beside that run,
    the two would fight for the same cores), while the binary is built and its files
    written (VGG-19: half a second of the compile's). One that needs the device (the
    float64 graph, also when onnxruntime cannot take the model) runs on the calling thread,
    before the binary's capture (here) or after it (in `result()`), never during: it is no
    part of it."""

    def __init__(self, compiled: Any, inputs: Mapping[str, np.ndarray]) -> None:
        self._compiled, self._inputs = compiled, inputs
        self._outcome: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        if _onnxruntime_for(compiled) is None:
            self._outcome["result"] = reference(compiled, inputs)
        else:
            self._thread = threading.Thread(target=self._run, name="mnrt-reference", daemon=True)

    def _run(self) -> None:
        _off_device.active = True
        try:
            with observe.unobserved():
                self._outcome["result"] = reference(self._compiled, self._inputs)
        except _NeedsDevice:
            pass
        except BaseException as e:  # raised by result(), on the thread that waits
            self._outcome["error"] = e

    def start(self) -> None:
        """Begin the onnxruntime reference on its thread (once; nothing to begin else)."""
        if self._thread is not None and self._thread.ident is None:
            self._thread.start()

    def result(self) -> tuple[str, dict]:
        """The reference's source and outputs, once it is done."""
        if self._thread is not None:
            if self._thread.ident is None:  # no run was recorded: not started
                self._thread.start()
            self._thread.join()
        if "error" in self._outcome:
            raise self._outcome.pop("error")
        if "result" not in self._outcome:
            with observe.unobserved():
                self._outcome["result"] = reference(self._compiled, self._inputs)
        return self._outcome["result"]


def _onnxruntime(ort: Any, compiled: Any, inputs: Mapping[str, np.ndarray]) -> dict | None:
    """The ONNX model's outputs from an onnxruntime session; None when onnxruntime cannot
    load or run it (an op it lacks), so that the float64 graph run stands in."""
    from onnx import helper

    model = compiled.onnx_model
    feeds = {
        i.name: np.asarray(inputs[i.name]).astype(
            helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        )
        for i in model.graph.input
        if i.name in inputs
    }
    options = ort.SessionOptions()
    # One run needs no graph optimisations: constant folding and weight prepacking cost
    # more than they save in a single run (VGG-19: session 0.8 s and run 0.25 s, against no
    # session time and a run of 0.5 s), and the unfused kernels compute the model as
    # written, which is what the reference is for.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # Its worker threads would spin for a while after the run, taking the cores from the
    # compile's own work that follows.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # Errors only: its warnings about the user's model (an output shape it declares and
    # does not compute) were printed to the terminal in the middle of `mnrt compile`'s own
    # output; what the reference cannot run, it says by raising.
    options.log_severity_level = 3
    # The file the compile read, where it still holds what it did then: onnxruntime reads
    # it without the copy of every weight serialising the model makes (ViT-B/16: 346 MB),
    # and finds external data beside it (a model of more than 2 GB cannot be serialised).
    path, stamp = compiled.model_file, compiled.model_stamp
    same = path is not None and stamp is not None and file_stamp(path) == stamp
    try:
        session = ort.InferenceSession(
            str(path) if same else model.SerializeToString(),
            options,
            providers=["CPUExecutionProvider"],
        )
        results = session.run(None, feeds)
    except Exception:  # whatever onnxruntime raises on a model it cannot take
        return None
    names = [o.name for o in model.graph.output]
    return {n: np.asarray(r) for n, r in zip(names, results) if n in compiled.graph.outputs}


def saturated(compiled: Any) -> dict[str, tuple[int, int]]:
    """After a run: the half values still in their buffers (and the checked values computed
    from half ones) with elements at MN-Core half's saturation limit (HALF_MAX: half
    rounds overflow to it, never to infinity), or within two of its ulps: name -> (how
    many, of how many elements). Such an element no longer depends on what produced it,
    so no golden can see an error there."""
    graph, bindings = compiled.graph, compiled.lowered.bindings
    if not any(v.dtype is not None and v.dtype.is_half for v in graph.values.values()):
        return {}
    last_writer = _last_writers(graph, bindings)
    kept = [n for n in checked_values(compiled) if graph.values[n].dtype.is_float]
    kept += [n for n in bindings if last_writer.get(id(bindings[n])) == n
             and graph.values[n].dtype.is_half and n not in kept]  # fmt: skip
    limit = HALF_MAX * (1.0 - 2.0 ** -(HALF_MAN_BITS - 1))
    counts = {}
    with observe.unobserved():
        for name in kept:
            values = compiled.ctx.queue.enqueue_read_buffer(bindings[name], blocking=True)
            counts[name] = (int(np.count_nonzero(np.abs(values) >= limit)), values.size)
    return {name: n for name, n in counts.items() if n[0]}


def accuracy(
    compiled: Any, outputs: Mapping[str, np.ndarray], source: str, expected: Mapping
) -> dict:
    """The compiled outputs against the reference, each with the compiled precision's
    tolerance (no finer than float32's against onnxruntime, which computes in the model's
    float32): report.json's record, and a warning naming each output that misses it, and
    each checked value that saturated half's range."""
    float_dtype = compiled.options["float_dtype"]
    result: dict = {"reference": source, "float_dtype": float_dtype, "outputs": {}}
    clipped = saturated(compiled)
    if clipped:
        result["saturated"] = {name: count for name, (count, _) in clipped.items()}
        counts = ", ".join(f"{n!r} has {k} of {size} elements"
                           for n, (k, size) in clipped.items())  # fmt: skip
        warn(
            f"compiled graph '{compiled.graph.name}': {counts}"
            f" at half's largest magnitude ({HALF_MAX:.4g}): float_dtype={float_dtype} "
            "overflows there and the result is clipped, whatever produced it; compile with "
            "float_dtype='float'",
        )
    bindings = compiled.lowered.bindings
    dtypes = {name: bindings[name].dtype for name in expected}
    result["outputs"] = compare_outputs(
        compiled.graph.name, float_dtype, outputs, source, expected, dtypes,
        quantized=quantizes(compiled.graph),
    )  # fmt: skip
    return result


def quantizes(graph: Graph) -> bool:
    """Whether a graph rounds float values it computes to a narrow integer type (a
    quantized model's QuantizeLinear, or onnxruntime's QLinear ops): there a float32
    rounding a reference does in another order can move a value a whole quantization step,
    which later layers carry on."""
    for node in graph.nodes:
        if node.op == "cast":
            to, of = graph.values[node.outputs[0]].dtype, graph.values[node.inputs[0]].dtype
            if to.is_integer and to.itemsize <= 2 and of.is_float:
                return True
    return False


def compare_outputs(
    graph_name: str,
    float_dtype: str,
    outputs: Mapping[str, np.ndarray],
    source: str,
    expected: Mapping[str, np.ndarray],
    dtypes: Mapping[str, DType],
    quantized: bool = False,
) -> dict[str, dict]:
    """`accuracy`'s comparisons: each output (as stored, of device dtype `dtypes[name]`)
    against its reference, a record each, warning where one misses its tolerance (and why
    a `quantized` graph may: see `quantizes`). A pipelined compile names each
    microbatch's output as its golden does (`name#m`)."""
    advice = (
        "the model quantizes values it computes, and a float rounding on the other side of "
        "a quantization step's midpoint moves a value by a whole step, which later layers "
        "carry on"
        if quantized
        else "a higher float_dtype computes it more accurately"
    )
    precision = float_dtype
    if source == "onnxruntime" and list(ACCURACY).index(float_dtype) < list(ACCURACY).index(
        "float"
    ):
        precision = "float"
    records = {}
    for name, want in expected.items():
        dtype = dtypes[name]
        rtol, atol = accuracy_tolerance(precision, want, dtype)
        got = np.asarray(outputs[name])
        want = np.asarray(want)
        if want.shape != got.shape:
            raise InvalidArgumentError(
                f"the {source} reference gives output {name!r} the shape {want.shape}, the "
                f"compiled graph {got.shape}; the model's declared output shape is wrong"
            )
        check = compare(name, got, want.astype(np.float64), dtype, rtol, atol)
        records[name] = {
            k: getattr(check, k)
            for k in ("passed", "rtol", "atol", "max_abs_err", "max_rel_err", "mismatches")
        }
        if not check.passed:
            warn(
                f"compiled graph '{graph_name}': output {name!r} differs from the "
                f"{source} reference by up to {check.max_abs_err:.3g} ({check.max_rel_err:.3g} "
                f"relative) in {check.mismatches} of {got.size} elements, beyond the "
                f"{precision} tolerance (rtol {rtol:.3g}, atol {atol:.3g}); {advice}",
            )
    return records
