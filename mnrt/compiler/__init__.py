"""The graph compiler: IR, the Python graph builder, passes, lowering to device programs and
the MLSDK-style Context API.

Imported only by what needs it (`mnrt run` never does; `import mnrt` loads it on first use
of mnrt.Context). Optimisation passes beyond float_dtype, codegen_dir, compile caching and
the CLI are still to come.
"""

from .builder import GraphBuilder, Symbol
from .context import CacheOptions, CompiledFunction, Context, MNDevice, TensorProxy
from .ir import Graph, GraphError, Node, Value
from .lower import Lowered, lower, plan_buffers
from .onnx_frontend import UnsupportedModelError, from_onnx

__all__ = [
    "CacheOptions",
    "CompiledFunction",
    "Context",
    "Graph",
    "GraphBuilder",
    "GraphError",
    "Lowered",
    "MNDevice",
    "Node",
    "Symbol",
    "TensorProxy",
    "UnsupportedModelError",
    "Value",
    "from_onnx",
    "lower",
    "plan_buffers",
]
