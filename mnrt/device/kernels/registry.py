"""The kernel registry: one `KernelDef` per device kernel, found by name.

A kernel is four small functions: attribute checking (declarative, from `Attr`s), `infer`
(output shapes and allowed dtypes from input specs: the only place shape rules live),
`compute` (numpy, in the compute dtype) and `cost` (FLOPs and bytes for the timing model).
Families share helpers in their own modules; this module knows no kernel by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ...errors import KernelAttributeError, UnknownKernelError
from ..dtypes import DType
from ..dtypes import dtype as resolve_dtype

REQUIRED = object()


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one operand, without data."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def size(self) -> int:
        # math.prod, not numpy's: exact for any shape (int64 wraps), and a compile asks
        # tens of thousands of times.
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"


@dataclass(frozen=True)
class OutSpec:
    """What `infer` says of one output: its shape, and the dtypes it may have (natural first)."""

    shape: tuple[int, ...]
    dtypes: tuple[DType, ...]


class Out(NamedTuple):
    """One output as `compute` sees it: where to write, when the bits need no rounding."""

    shape: tuple[int, ...]
    dtype: DType
    # A writable compute-dtype array of the output's shape, or None: the destination itself
    # when storing needs no rounding, else scratch that the store rounds from. A kernel may
    # write its result there and return it, or ignore it and return a new array.
    buf: np.ndarray | None


@dataclass(frozen=True)
class Cost:
    """Work of one kernel execution, for the timing model in device/cost.py.

    `dram_bytes` is the traffic a well-tiled kernel makes to DRAM (each operand once unless
    it does not fit on chip); `traffic` splits it by operand (inputs, then outputs) when an
    operand moves other than its whole size once (a slice reads only what it selects), so
    an operand kept on chip takes exactly its own bytes off DRAM; `sram_bytes` is on-chip
    traffic between L1BM/L2BM and the PEs; `parallel` is how many independent work units
    the mapping spreads over the PE array (0 means the work divides evenly) and `fill` the
    share of a unit's capacity the work fills (a GEMM's 4x4 output blocks at a ragged edge
    are partly empty, yet take a PE for a whole wave); `matrix` says the flops run on the
    MAU (matrix unit) rather than the vector ALUs. `steps` is set by a kernel that runs
    others in one launch (a chain): each step's own cost with its operands (a `Part`),
    which the model prices together (device/cost.py `model_chain`); the fields above then
    hold their sums, with every intermediate going through DRAM.
    """

    flops: float
    dram_bytes: float
    sram_bytes: float = 0.0
    parallel: int = 0
    matrix: bool = False
    fill: float = 1.0
    traffic: tuple[float, ...] | None = None
    steps: tuple[Part, ...] = ()
    # Bytes moved between L1Bs through L2BM, and within PEs' local memory: what a layout
    # switch (the relayout kernel) moves instead of DRAM traffic.
    l2bm_bytes: float = 0.0
    lm_bytes: float = 0.0
    # A chain's: bytes of PE local memory its intermediates may take (None: the chip's
    # whole local memory; a compiled program leaves them what placement did not use).
    lm_room: float | None = None


class Part(NamedTuple):
    """One step of a kernel made of others (a chain), as the timing model prices it: its
    own cost, its inputs, the position among them of the result before it (`at`), which of
    the whole kernel's inputs each other one is (`takes`, in order), its output, and
    whether its kernel is pointwise; `written` where its result is also an output of the
    whole kernel (a chain's tap), which DRAM takes beside the step after it."""

    cost: Cost
    ins: tuple[TensorSpec, ...]
    at: int
    takes: tuple[int, ...]
    y: TensorSpec
    pointwise: bool = False
    written: bool = False

    @property
    def x(self) -> TensorSpec:
        """The result of the step before (the whole kernel's first input, for the first)."""
        return self.ins[self.at]


_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int, np.integer),
    "float": (int, float, np.integer, np.floating),
    "bool": (bool, np.bool_),
    "str": (str,),
    "ints": (list, tuple),
    "floats": (list, tuple),
}


@dataclass(frozen=True)
class Attr:
    """Schema of one kernel attribute."""

    kind: str  # one of _KINDS
    default: Any = REQUIRED
    doc: str = ""
    choices: tuple | None = None
    # A further check of a value of its kind, returning its canonical form (a chain's
    # steps, a JSON list): raises KernelAttributeError naming what is wrong.
    parse: Callable[[Any], Any] | None = None

    def check(self, kernel: str, name: str, value: Any) -> Any:
        """Validate `value` and return it in canonical form (ints as int, lists as tuples)."""
        ok = isinstance(value, _KINDS[self.kind])
        if self.kind in ("int", "float") and isinstance(value, (bool, np.bool_)):
            ok = False
        if ok and self.kind in ("ints", "floats"):
            elem = _KINDS["int" if self.kind == "ints" else "float"]
            ok = all(isinstance(v, elem) and not isinstance(v, bool) for v in value)
        if not ok:
            raise KernelAttributeError(
                f"kernel '{kernel}': attribute '{name}' must be {self.kind}, got {value!r}"
            )
        canon = {
            "int": int,
            "float": float,
            "bool": bool,
            "str": str,
            "ints": lambda v: tuple(int(x) for x in v),
            "floats": lambda v: tuple(float(x) for x in v),
        }[self.kind](value)
        if self.choices is not None and canon not in self.choices:
            raise KernelAttributeError(
                f"kernel '{kernel}': attribute '{name}' is {value!r}; "
                f"valid values are {', '.join(map(repr, self.choices))}"
            )
        return canon if self.parse is None else self.parse(canon)


# Attributes every kernel takes besides its own; unlike those they have no default filled in.
COMMON_ATTRS: dict[str, Attr] = {
    "onchip": Attr(
        "ints",
        (),
        "operands (inputs, then outputs, by position) the program keeps in PE local memory "
        "around this kernel: the timing model prices their bytes as on-chip traffic, not DRAM",
    ),
    "mapping": Attr(
        "ints",
        (),
        "how a matrix kernel's loops tile over the PEs and memories (device/mapping.py: "
        "pe_b, pe_m, pe_n, reg_m, reg_n, tile_k, accum, keep); decides its modelled time",
    ),
}


InferFn = Callable[[Sequence[TensorSpec | None], Mapping[str, Any]], list[OutSpec]]
ComputeFn = Callable[[Sequence[np.ndarray | None], Mapping[str, Any], Sequence[Out]], list]
CostFn = Callable[[Sequence[TensorSpec | None], Sequence[TensorSpec], Mapping[str, Any]], Cost]
# How many rounded operations each output element accumulates (see device/tolerance.py).
ReductionFn = Callable[[Sequence[TensorSpec | None], Mapping[str, Any]], int]
# The magnitude of the largest term an output element sums, from each input's scale (its
# largest finite magnitude; None for an optional input left out), or None where these
# attributes do not say: see KernelDef.terms.
TermsFn = Callable[[Sequence[float | None], Mapping[str, Any]], float | None]
# The error of each output given the inputs' (device/tolerance.py `kernel_errors`).
ErrorsFn = Callable[
    [Sequence[TensorSpec | None], Sequence[TensorSpec], Mapping[str, Any], Sequence[float]],
    list[float],
]


# Kernel attributes that name the dtype of the value a kernel makes: cast's `to`; fill's,
# range's and eye_like's `dtype` ('' for eye_like: x's).
RESULT_DTYPE_ATTRS = ("to", "dtype")


def retarget_result_dtype(attrs: dict[str, Any], target: DType, floats: Collection[DType]) -> None:
    """Make the value a kernel's attributes say it makes `target` where they name one of
    `floats`: the kernel as it runs where every float is `target` (a compile at float_dtype
    float, a float64 reference)."""
    for key in RESULT_DTYPE_ATTRS:
        named = attrs.get(key)
        if named and resolve_dtype(named) in floats:
            attrs[key] = target.name


def exact(ins: Sequence[TensorSpec | None], attrs: Mapping[str, Any]) -> int:
    """`KernelDef.reduction` of a kernel that only moves or selects values: no rounding."""
    return 0


def elementwise(ins: Sequence[TensorSpec | None], attrs: Mapping[str, Any]) -> int:
    """`KernelDef.reduction` of a kernel computing each element from one element of each
    input: a few ulps of its working precision."""
    return 1


def largest(scales: Sequence[float | None], attrs: Mapping[str, Any]) -> float:
    """`KernelDef.terms` of a kernel whose terms are its inputs' elements: a sum or a
    difference, an average, a copy, an elementwise function of one value."""
    return max((s for s in scales if s is not None), default=0.0)


def products(scales: Sequence[float | None], attrs: Mapping[str, Any]) -> float:
    """`KernelDef.terms` of a kernel summing products of its first two inputs, scaled by
    `alpha`, and its third, scaled by `beta` (a GEMM, a convolution and its bias, mul)."""
    a, b, *rest = scales
    term = abs(attrs.get("alpha", 1.0)) * (a or 0.0) * (b or 0.0)
    if rest and rest[0] is not None:
        term = max(term, abs(attrs.get("beta", 1.0)) * rest[0])
    return term


@dataclass(frozen=True)
class KernelDef:
    """A registered kernel.

    `inputs` names the operands in order; a name ending in '?' is optional (its slot may be
    left out of the Kernel's input list), one ending in '*' takes one or more operands and
    one ending in '*?' none or more. An output ending in '?' is given where the attributes
    ask for it (a chain's `tap`): `infer` says how many outputs the attributes make.
    `reduction` states the kernel's error behaviour for the tolerance model
    (device/tolerance.py): how many terms each output element sums, from the operand specs
    and attributes (`elementwise`, `exact`, a GEMM's K); a kernel that does not state it is
    taken to sum everything its largest input holds, which is always safe. A kernel made of
    others (a chain) states `errors` instead: its outputs' errors as its parts' compose.
    `terms` states how large the terms an output element sums are, from the inputs' scales
    (`largest`, `products`): an output that cancels to near zero still carries the rounding
    of its terms, which `--locate`'s verdict allows (device/tolerance.py, stats_tolerance);
    a kernel that states neither it nor `exact` is taken to sum terms near one.
    """

    name: str
    doc: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Attr]
    infer: InferFn
    compute: ComputeFn
    cost: CostFn
    reduction: ReductionFn | None = None
    # Runs on the MAU (matrix unit): what the compiler's mixed precision puts in half and
    # the layout planner lays out for it (its cost says so per launch, in Cost.matrix).
    matrix: bool = False
    # Each output element from the same element of each input (broadcast): a chain streams
    # such a step's input from the step before element by element (device/cost.py).
    pointwise: bool = False
    # Each output element is one input element, and each input element lands in one place
    # (reshape, transpose): a matrix kernel's epilogue (a chain it heads) stores its blocks
    # where such a step puts them, as CUTLASS's permuted outputs do.
    rearranges: bool = False
    # Its one output holds its one input's bits in the same order (reshape, copy): whoever
    # fingerprints outputs may take the input's, where it has just taken it.
    same_bits: bool = False
    errors: ErrorsFn | None = None
    terms: TermsFn | None = None
    # Checks the attributes together once each has its kind (a relayout's layout texts
    # must parse): raises KernelAttributeError naming what is wrong.
    validate: Callable[[Mapping[str, Any]], None] | None = None
    _min_inputs: int = field(init=False, repr=False)
    _max_inputs: float = field(init=False, repr=False)
    _min_outputs: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        required = sum(1 for n in self.inputs if not n.endswith("?"))
        variadic = any(n.rstrip("?").endswith("*") for n in self.inputs)
        object.__setattr__(self, "_min_inputs", required)
        object.__setattr__(self, "_max_inputs", float("inf") if variadic else len(self.inputs))
        object.__setattr__(self, "_min_outputs", sum(not n.endswith("?") for n in self.outputs))

    def term_scale(self, scales: Sequence[float | None], attrs: Mapping[str, Any]) -> float | None:
        """The magnitude of the largest term an output element sums, given its inputs'
        scales (see `terms`; a kernel that only moves values: its largest input's), or None
        where the kernel does not say."""
        if self.terms is not None:
            scale = self.terms(scales, attrs)
            return None if scale is None else float(scale)
        return largest(scales, attrs) if self.reduction is exact else None

    @property
    def required_outputs(self) -> int:
        """How many outputs every use of the kernel gives (its optional ones follow)."""
        return self._min_outputs

    @property
    def accepted_attrs(self) -> dict[str, Attr]:
        """Its own attributes, then the ones every kernel takes."""
        return {**self.attrs, **COMMON_ATTRS}

    def check_attrs(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        """Validated attributes with defaults filled in."""
        attrs = dict(attrs or {})
        unknown = sorted(set(attrs) - set(self.accepted_attrs))
        if unknown:
            valid = ", ".join(self.accepted_attrs)
            raise KernelAttributeError(
                f"kernel '{self.name}' has no attribute {', '.join(map(repr, unknown))}; "
                f"its attributes are: {valid}"
            )
        out = {}
        for name, schema in self.attrs.items():
            if name in attrs:
                out[name] = schema.check(self.name, name, attrs[name])
            elif schema.default is REQUIRED:
                raise KernelAttributeError(
                    f"kernel '{self.name}' needs attribute '{name}' ({schema.doc})"
                )
            else:
                out[name] = schema.default
        for name, schema in COMMON_ATTRS.items():
            if name in attrs and name not in self.attrs:
                out[name] = schema.check(self.name, name, attrs[name])
        if self.validate is not None:
            self.validate(out)
        return out

    def check_arity(self, n_inputs: int, n_outputs: int) -> None:
        if not self._min_inputs <= n_inputs <= self._max_inputs:
            raise KernelAttributeError(
                f"kernel '{self.name}' takes inputs ({', '.join(self.inputs)}), "
                f"got {n_inputs} operand(s)"
            )
        if not self._min_outputs <= n_outputs <= len(self.outputs):
            raise KernelAttributeError(
                f"kernel '{self.name}' has outputs ({', '.join(self.outputs)}), "
                f"got {n_outputs} operand(s)"
            )

    def check_outputs(self, given: int, made: Sequence[OutSpec]) -> None:
        """A kernel whose attributes decide how many outputs it makes (`infer` gave `made`)
        is given exactly those."""
        if given != len(made):
            raise KernelAttributeError(
                f"kernel '{self.name}' makes {len(made)} output(s) with these attributes, "
                f"got {given} output slot(s); give one slot for each of "
                f"({', '.join(n.rstrip('?') for n in self.outputs[: len(made)])})"
            )

    def describe(self) -> dict[str, Any]:
        """JSON-ready listing entry for `mnrt.kernels()`."""
        return {
            "name": self.name,
            "doc": self.doc,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "attrs": {
                n: {
                    "kind": a.kind,
                    "default": _json_ready(a.default),
                    "required": a.default is REQUIRED,
                    "doc": a.doc,
                    **({"choices": list(a.choices)} if a.choices else {}),
                }
                for n, a in self.accepted_attrs.items()
            },
        }


def _json_ready(default: Any) -> Any:
    """A default as strict JSON holds it: None when required, infinities and nan as the
    strings 'inf', '-inf' and 'nan' (the light binary's JSON form spells them so too)."""
    if default is REQUIRED:
        return None
    if isinstance(default, float) and not math.isfinite(default):
        return str(default)
    return default


_REGISTRY: dict[str, KernelDef] = {}


def register(kdef: KernelDef) -> KernelDef:
    if kdef.name in _REGISTRY:
        raise ValueError(f"kernel '{kdef.name}' registered twice")
    _REGISTRY[kdef.name] = kdef
    return kdef


def lookup(name: str) -> KernelDef:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):  # TypeError: a name that is not a string (a list, say)
        raise UnknownKernelError(
            f"unknown kernel {name!r}: known kernels are {', '.join(sorted(_REGISTRY))}"
        ) from None


def matrix_kernels() -> frozenset[str]:
    """Names of the kernels that run on the matrix unit."""
    return frozenset(k.name for k in _REGISTRY.values() if k.matrix)


def all_kernels() -> list[KernelDef]:
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]
