"""Where the ONNX frontend's public names were before it became the `mnrt.compiler.onnx`
package; kept only while tests/compiler/*_review*.py (being folded into feature test modules
elsewhere) import them from here. New code imports `mnrt.compiler.onnx`."""

from .onnx import InvalidModelError, UnsupportedModelError, from_onnx

__all__ = ["InvalidModelError", "UnsupportedModelError", "from_onnx"]
