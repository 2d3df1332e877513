"""The graph compiler: IR, the Python graph builder, passes, lowering to device programs and
the MLSDK-style Context API.

Imported only by what needs it (`mnrt run` never does; `import mnrt` loads it on first use
of mnrt.Context); the ONNX frontend imports `onnx` only when given a model.
"""

from .builder import GraphBuilder, Symbol
from .context import CacheOptions, CompiledFunction, Context, MNDevice, TensorProxy
from .ir import Graph, GraphError, Node, Value
from .lower import Lowered, lower, plan_buffers
from .mapper import Front, MappedPoint, MapperError, Metrics, map_kernel
from .mpmd import MpmdError
from .mpmd.compiled import PipelinedFunction
from .onnx import InvalidModelError, UnsupportedModelError, from_onnx, load_model

__all__ = [
    "CacheOptions",
    "CompiledFunction",
    "Context",
    "Front",
    "Graph",
    "GraphBuilder",
    "GraphError",
    "InvalidModelError",
    "Lowered",
    "MNDevice",
    "MappedPoint",
    "MapperError",
    "Metrics",
    "MpmdError",
    "Node",
    "PipelinedFunction",
    "Symbol",
    "TensorProxy",
    "UnsupportedModelError",
    "Value",
    "from_onnx",
    "load_model",
    "lower",
    "map_kernel",
    "plan_buffers",
]
