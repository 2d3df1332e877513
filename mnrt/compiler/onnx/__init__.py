"""The ONNX frontend: an ONNX model becomes a compiler Graph of device kernels.

    graph = from_onnx("model.onnx")

graph_import walks the model; each node goes to constant folding (fold) when its inputs are
all known, else to its converter in the registry (ops/__init__.py: one line per op, one
module per op family). names holds the ONNX vocabulary shared with the exporter.
"""

from .errors import InvalidModelError, UnsupportedModelError
from .fold import evaluator_unreliable_ops
from .graph_import import from_onnx, load_model
from .registry import supported_ops

__all__ = [
    "InvalidModelError",
    "UnsupportedModelError",
    "evaluator_unreliable_ops",
    "from_onnx",
    "load_model",
    "supported_ops",
]
