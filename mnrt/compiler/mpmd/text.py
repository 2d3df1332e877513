"""The MPMD IR's text form: `dump` prints a program, `parse` reads that text back.

    func @mlp
      input %x: float[8x64] device=0
      param %w0: float[64x64]
      fragment @f0 stage=0 device=0 origin=["layer0"] (%x) -> (%h) {
        %h: float[8x64] = gemm(%x, %w0) {} name="gemm0"
      }
      transfer @t0 %h -> %h.t device 0 -> 1
      return %y

Pass tests are written in it (text in, one pass, text out), and the codegen_dir holds the
program after each pass in it. Node attributes print where they differ from the kernel's
defaults. Parameters print without their data: a parsed program's parameters hold none
(passes never need it).
"""

from __future__ import annotations

import ast
import json
import re

from ...device.dtypes import dtype as resolve_dtype
from ...device.kernels import lookup
from ...errors import MnrtError
from ..ir import INPUT, PARAM, TEMP, Node, Value
from .ir import Fragment, MpmdError, MpmdProgram, Transfer

_BARE = re.compile(r"[A-Za-z0-9_./\-]+")
_REF = r'%(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_./\-]+)'


def ref(name: str) -> str:
    """A value as the text writes it: %name, quoted when it holds other characters."""
    return f"%{name}" if _BARE.fullmatch(name) else "%" + json.dumps(name)


def _type(value: Value) -> str:
    return f"{value.dtype.name}[{'x'.join(map(str, value.shape))}]"


def _refs(names: list[str]) -> str:
    return ", ".join(ref(n) for n in names)


def dump(program: MpmdProgram) -> str:
    values = program.values
    lines = [f"func @{program.name}"]
    lines += [
        f"  input {ref(n)}: {_type(values[n])} device={program.homes[n]}" for n in program.inputs
    ]
    lines += [f"  param {ref(n)}: {_type(v)}" for n, v in values.items() if v.role == PARAM]
    for op in program.ops:
        if isinstance(op, Transfer):
            lines.append(
                f"  transfer @{op.name} {ref(op.source)} -> {ref(op.result)} "
                f"device {op.src} -> {op.dst}"
            )
            continue
        lines.append(
            f"  fragment @{op.name} stage={op.stage} device={op.device} "
            f"origin={json.dumps(list(op.origin))} ({_refs(op.inputs)}) -> "
            f"({_refs(op.outputs)}) {{"
        )
        for node in op.nodes:
            outs = ", ".join(f"{ref(o)}: {_type(values[o])}" for o in node.outputs)
            lines.append(
                f"    {outs} = {node.op}({_refs(node.inputs)}) {_attrs(node)!r} "
                f"name={json.dumps(node.name)}"
            )
        lines.append("  }")
    lines.append(f"  return {_refs(program.outputs)}")
    return "\n".join(lines) + "\n"


def _attrs(node: Node) -> dict:
    """The attributes that differ from the kernel's defaults (parse fills those back in)."""
    schema = lookup(node.op).attrs
    return {k: v for k, v in node.attrs.items() if k not in schema or schema[k].default != v}


def _names(text: str) -> list[str]:
    return [_unref(m) for m in re.findall(_REF, text)]


def _unref(token: str) -> str:
    body = token[1:]
    return json.loads(body) if body.startswith('"') else body


def _value(name: str, type_text: str, role: str, where: str) -> Value:
    m = re.fullmatch(r"(\w+)\[([0-9x]*)\]", type_text.strip())
    if m is None:
        raise MpmdError(f"{where}: type {type_text!r} is not dtype[AxBx...]")
    shape = tuple(int(d) for d in m.group(2).split("x")) if m.group(2) else ()
    return Value(name, shape, resolve_dtype(m.group(1)), role)


_INPUT = re.compile(rf"input ({_REF}): (\S+) device=(\d+)")
_PARAM = re.compile(rf"param ({_REF}): (\S+)")
_FRAGMENT = re.compile(
    r"fragment @(\S+) stage=(\d+) device=(\d+) origin=(\[.*?\]) \((.*?)\) -> \((.*?)\) \{"
)
_NODE = re.compile(r"(.*?) = (\w+)\((.*?)\) (\{.*\}) name=(\".*\")")
_OUT = re.compile(rf"({_REF}): (\S+)")
_TRANSFER = re.compile(rf"transfer @(\S+) ({_REF}) -> ({_REF}) device (\d+) -> (\d+)")


def parse(text: str) -> MpmdProgram:
    """The program `text` writes (as `dump` prints it); MpmdError names the bad line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("func @"):
        raise MpmdError("MPMD IR text starts with 'func @name'")
    program = MpmdProgram(lines[0][len("func @") :], {}, [], [], [], {})
    fragment: Fragment | None = None
    for number, line in enumerate(lines[1:], start=2):
        where = f"line {number} ({line!r})"
        try:
            fragment = _parse_line(program, fragment, line, where)
        except (MnrtError, ValueError, SyntaxError, TypeError, RecursionError) as e:
            raise MpmdError(e if str(e).startswith("line ") else f"{where}: {e}") from None
    if fragment is not None:
        raise MpmdError(f"fragment @{fragment.name} is not closed with '}}'")
    return program


def _parse_line(
    program: MpmdProgram, fragment: Fragment | None, line: str, where: str
) -> Fragment | None:
    values = program.values
    if fragment is not None:
        if line == "}":
            program.ops.append(fragment)
            return None
        m = _NODE.fullmatch(line)
        if m is None:
            raise MpmdError(f"{where}: expected '%out: type = op(%in, ...) {{attrs}} name=\"n\"'")
        outs = []
        for out in _OUT.finditer(m.group(1)):
            name = _unref(out.group(1))
            values[name] = _value(name, out.group(2), TEMP, where)
            outs.append(name)
        attrs = lookup(m.group(2)).check_attrs(ast.literal_eval(m.group(4)))
        fragment.nodes.append(
            Node(m.group(2), _names(m.group(3)), outs, attrs, json.loads(m.group(5)))
        )
        return fragment
    if m := _INPUT.fullmatch(line):
        name = _unref(m.group(1))
        values[name] = _value(name, m.group(2), INPUT, where)
        program.inputs.append(name)
        program.homes[name] = int(m.group(3))
    elif m := _PARAM.fullmatch(line):
        name = _unref(m.group(1))
        values[name] = _value(name, m.group(2), PARAM, where)
    elif m := _FRAGMENT.fullmatch(line):
        origin = tuple(json.loads(m.group(4)))
        return Fragment(
            m.group(1),
            int(m.group(2)),
            int(m.group(3)),
            [],
            _names(m.group(5)),
            _names(m.group(6)),
            origin,
        )
    elif m := _TRANSFER.fullmatch(line):
        source, result = _unref(m.group(2)), _unref(m.group(3))
        if source not in values:
            raise MpmdError(f"{where}: %{source} is not defined")
        values[result] = Value(result, values[source].shape, values[source].dtype, TEMP)
        program.ops.append(Transfer(m.group(1), source, result, int(m.group(4)), int(m.group(5))))
    elif line.startswith("return"):
        program.outputs = _names(line[len("return") :])
    else:
        raise MpmdError(f"{where}: expected input, param, fragment, transfer or return")
    return None
