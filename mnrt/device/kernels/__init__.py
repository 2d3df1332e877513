"""Device kernels. The import list below is the registry: a module registers its kernels
when imported, so adding a kernel family means adding one line here."""

from . import binary, conv, gemm, misc, norm, pool, reduce, shape, unary  # noqa: F401  (imported for registration)
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
]
