"""Device kernels. The import list below is the registry: a module registers its kernels
when imported, so adding a kernel family means adding one line here."""

from . import (  # noqa: F401  (imported for registration)
    activation,
    arg,
    binary,
    chain,
    conv,
    conv_transpose,
    einsum,
    gemm,
    generate,
    grid_sample,
    index,
    misc,
    norm,
    pool,
    rearrange,
    reduce,
    relayout,
    resize,
    scan,
    shape,
    unary,
)
from .registry import (
    REQUIRED,
    Attr,
    Cost,
    KernelDef,
    Out,
    OutSpec,
    TensorSpec,
    all_kernels,
    lookup,
    matrix_kernels,
    retarget_result_dtype,
)

__all__ = [
    "REQUIRED",
    "Attr",
    "Cost",
    "KernelDef",
    "Out",
    "OutSpec",
    "TensorSpec",
    "all_kernels",
    "lookup",
    "matrix_kernels",
    "retarget_result_dtype",
]
