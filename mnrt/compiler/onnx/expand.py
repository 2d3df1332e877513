"""Function expansion: an ONNX op that has no converter but that ONNX defines as a function
of other ops (Attention, and many more) is imported as that function's body, the
definition ONNX itself gives for the model's opset."""

from __future__ import annotations

from typing import Any


def function_body(node: Any, opset: int, input_types: list[Any | None]) -> list[Any] | None:
    """The nodes of ONNX's function body for `node` at `opset` (the newest definition not
    newer than it), with the node's inputs, outputs and attributes substituted and its
    internal values renamed apart; None when ONNX defines no function for it (or one over
    subgraphs, which are not expanded). `input_types` are the TypeProtos of its inputs
    (None where unknown), which some functions depend on."""
    from onnx import AttributeProto, FunctionProto, TypeProto, defs

    try:
        schema = defs.get_schema(node.op_type, opset, node.domain)
    except defs.SchemaError:
        return None
    plain = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if not plain and not dependent:
        return None
    function = FunctionProto()
    if dependent and (not plain or max(dependent) >= max(plain)):
        types = [(t or TypeProto()).SerializeToString() for t in input_types]
        try:
            text = schema.get_context_dependent_function_with_opset_version(
                max(dependent), node.SerializeToString(), types
            )
        except Exception:  # onnx could not build it for these inputs: not expandable
            return None
    else:
        text = schema.get_function_with_opset_version(max(plain))
    function.ParseFromString(text)
    attrs = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in attrs and spec.default_value.name:
            attrs[name] = spec.default_value
    prefix = f"{node.name or node.op_type}_{id(node)}_"
    names = dict(zip(function.input, [*node.input, *[""] * len(function.input)]))
    names.update((o, n) for o, n in zip(function.output, node.output) if n)

    def rename(name: str) -> str:
        return names.get(name, prefix + name if name else "")

    body = []
    for inner in function.node:
        copy = type(inner)()
        copy.CopyFrom(inner)
        del copy.input[:], copy.output[:], copy.attribute[:]
        copy.input.extend(rename(n) for n in inner.input)
        copy.output.extend(rename(n) for n in inner.output)
        for a in inner.attribute:
            if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                return None
            if a.ref_attr_name:
                if a.ref_attr_name in attrs:
                    ref = type(a)()
                    ref.CopyFrom(attrs[a.ref_attr_name])
                    ref.name = a.name
                    copy.attribute.append(ref)
            else:
                copy.attribute.append(a)
        copy.name = f"{node.name or node.op_type}/{inner.name or inner.op_type}"
        body.append(copy)
    return body
