"""The graph compiler: IR, the Python graph builder, and lowering to device programs.

Imported only by what needs it (`mnrt run` never does). The ONNX frontend, optimisation
passes and the MLSDK-style Context API are still to come.
"""

from .builder import GraphBuilder, Symbol
from .ir import Graph, GraphError, Node, Value
from .lower import Lowered, lower, plan_buffers

__all__ = [
    "Graph",
    "GraphBuilder",
    "GraphError",
    "Lowered",
    "Node",
    "Symbol",
    "Value",
    "lower",
    "plan_buffers",
]
