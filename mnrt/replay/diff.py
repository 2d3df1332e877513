"""What differs between two light binaries (`mnrt diff A B`).

Commands are compared as a text diff compares lines: each command becomes a canonical
value (its union type's name and its fields, every blob id replaced by the blob's hash and
size, programs in full), the two sequences are aligned (difflib), and commands paired in a
changed stretch (the same buffer or program by name, wherever it moved, else the same type
in order) are compared field by field: programs kernel by kernel, aligned by the weights
they read and then by op (operands, attributes, the mapping attributes among them),
written data by hash, goldens by value (max abs / rel error, decoded in the buffer's
dtype). Any command type is handled by its name and fields, so new ones need nothing here.
Payloads are decompressed only for goldens that differ, and for blobs of one hash stored
as other bytes (a corrupt copy is unreadable, not equal): diffing two VGG-19 binaries
compares their stored weights, 0.7 MB, and decompresses none of their 548 MB.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..device.dtypes import BY_CODE
from ..errors import InvalidBinaryError
from ..format import LightBinary
from ..format.edit import blob_attrs
from ..format.fb.CommandUnion import CommandUnion
from ..host.golden import compare
from .align import kernel_opcodes
from .plan import validate

# Union member code -> its name (generated enum), for any command type.
COMMAND_TYPES = {
    v: k for k, v in vars(CommandUnion).items() if not k.startswith("_") and isinstance(v, int)
}
_GOLDEN_ATTRS = ("golden",)
# Commands that create a buffer or program, with the field of the id they give it, and the
# fields of other commands that name one.
_CREATES = {"CreateBuffer": "bufferId", "CreateProgram": "programId"}
_ID_FIELDS = ("bufferId", "bufferIds", "srcId", "dstId", "programId")
_WHOLE_KERNEL = re.compile(r"program\.kernels\[\d+\]")
# Header facts two captures of one program share; creation time, host and Python are not.
_HEADER = ("version", "device")


def plain(value: Any) -> Any:
    """A decoded FlatBuffers object (object API) as plain, comparable Python values."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "nan"  # NaN (a default tolerance) equals itself here
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in sorted(vars(value).items())}
    return value


@dataclass
class _Side:
    """One binary as the diff sees it: each command's canonical value and type name."""

    binary: LightBinary
    name: str  # for errors: the binary's path, else "A" or "B"
    values: list[dict] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    dtypes: dict[int, int] = field(default_factory=dict)  # buffer id -> dtype code
    buffers: dict[int, str] = field(default_factory=dict)  # buffer id -> its name

    @classmethod
    def of(cls, binary: LightBinary, name: str) -> _Side:
        side = cls(binary, str(binary.path or name))
        infos = binary.blobs.infos
        for c in binary.commands:
            name = COMMAND_TYPES.get(c.cmdType, f"type {c.cmdType}")
            body = plain(c.cmd)
            for attr in blob_attrs(c.cmdType):
                blob = body.get(attr, 0)
                if blob and 0 < blob <= len(infos):
                    info = infos[blob - 1]
                    body[attr] = {"hash": f"{info.hash:016x}", "size": info.size}
            if name == "CreateBuffer":
                side.dtypes[c.cmd.bufferId] = c.cmd.desc.dtype
                named = (body.get("desc") or {}).get("name")
                if isinstance(named, str) and named:
                    side.buffers[c.cmd.bufferId] = named
            side.values.append(body)
            side.names.append(name)
            side.keys.append(name + json.dumps(body, sort_keys=True))
        return side

    def read(self, blob: int) -> memoryview:
        """A payload; one this binary cannot give is an error naming the binary."""
        try:
            return self.binary.blobs.read(blob)
        except InvalidBinaryError as e:
            raise InvalidBinaryError(f"{self.name}: {e}") from None


def _changes(a: Any, b: Any, path: str = "") -> list[dict]:
    """Field-level differences between two plain values, with dotted paths."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _changes(a.get(k), b.get(k), f"{path}.{k}" if path else k)
        return out
    if a == b:
        return []
    return [{"field": path, "a": a, "b": b}]


def _program_changes(a: dict, b: dict) -> list[dict]:
    """Two programs compared kernel by kernel, aligned as a text diff aligns lines: first by
    the weights they read (see align.py), then by op: two compiles of one model at other
    presets name their intermediate values differently and fuse kernels away, and their
    convolutions then still pair up (their operands, epilogues and mappings compared)."""
    out = _changes(a.get("name"), b.get("name"), "program.name")
    views_a, views_b = ({v["slot"]: v for v in p.get("views") or []} for p in (a, b))
    out += _changes(views_a, views_b, "program.views")
    ka, kb = a.get("kernels") or [], b.get("kernels") or []
    for tag, i1, i2, j1, j2 in kernel_opcodes(ka, kb):
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs = zip(range(i1, i2), range(j1, j2))
        else:
            out += [
                {"field": f"program.kernels[{i}]", "a": ka[i], "b": None} for i in range(i1, i2)
            ]
            out += [
                {"field": f"program.kernels[{j}]", "a": None, "b": kb[j]} for j in range(j1, j2)
            ]
            continue
        for i, j in pairs:
            attrs_a = {x["name"]: x for x in ka[i].get("attrs") or []}
            attrs_b = {x["name"]: x for x in kb[j].get("attrs") or []}
            rest_a = {k: v for k, v in ka[i].items() if k != "attrs"}
            rest_b = {k: v for k, v in kb[j].items() if k != "attrs"}
            where = f"program.kernels[{i}]" + ("" if i == j else f"/[{j}]")
            out += _changes(rest_a, rest_b, where)
            for name in sorted(set(attrs_a) | set(attrs_b)):
                out += _changes(
                    _attr_value(attrs_a.get(name)), _attr_value(attrs_b.get(name)),
                    f"{where}.attrs.{name}",
                )  # fmt: skip
    return out


def _attr_value(attr: dict | None) -> Any:
    if attr is None:
        return None
    return {1: attr["i"], 2: attr["f"], 3: bool(attr["i"]), 4: attr["s"], 5: attr["ints"],
            6: attr["floats"]}.get(attr["kind"], attr)  # fmt: skip


def _golden_error(sa: _Side, sb: _Side, ca: Any, cb: Any) -> dict:
    """Two goldens compared by value in their buffers' dtypes."""
    da, db = BY_CODE.get(sa.dtypes.get(ca.bufferId)), BY_CODE.get(sb.dtypes.get(cb.bufferId))
    if da is None or db is None:
        return {"comparable": False}
    ba, bb = sa.read(ca.golden), sb.read(cb.golden)
    sizes = [np.dtype(da.storage).itemsize, np.dtype(db.storage).itemsize]
    if len(ba) % sizes[0] or len(bb) % sizes[1]:  # a broken binary's: `mnrt verify` says so
        return {"comparable": False, "bytes": [len(ba), len(bb)]}
    va = da.from_storage(np.frombuffer(ba, da.storage))
    vb = db.from_storage(np.frombuffer(bb, db.storage))
    if va.shape != vb.shape:
        return {"comparable": False, "elements": [int(va.size), int(vb.size)]}
    # as a replay compares an output with its golden, with no tolerance
    check = compare("golden", va, vb, db, 0.0, 0.0)
    return {
        "comparable": True,
        "max_abs_err": check.max_abs_err,
        "max_rel_err": check.max_rel_err,
        "mismatched": check.mismatches,
        "elements": int(va.size),
    }


def _id_map(sa: _Side, sb: _Side, partner: dict[int, int]) -> dict[int, int]:
    """The id each buffer and program of `a` has in `b`, from the commands that create them
    and line up: two compiles that make one buffer more number every later object
    otherwise, and a command is no different for naming the same buffer by another id."""
    ids = {}
    for i, j in partner.items():
        if sa.names[i] == sb.names[j] and sa.names[i] in _CREATES:
            key = _CREATES[sa.names[i]]
            a, b = sa.values[i].get(key), sb.values[j].get(key)
            if isinstance(a, int) and isinstance(b, int):
                ids[a] = b
    return ids


def _as_in_b(value: dict, ids: dict[int, int]) -> dict:
    """A command's value of `a` with the buffer and program ids it names as `b` numbers
    them (`_id_map`); an id `b` has no counterpart of equals none of `b`'s (the object of
    that number in `b` is another one)."""
    out = dict(value)
    for key in _ID_FIELDS:
        v = out.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            out[key] = ids.get(v, f"a:{v}")
        elif isinstance(v, list):
            out[key] = [ids.get(x, f"a:{x}") if isinstance(x, int) else x for x in v]
    return out


def _pair(sa: _Side, sb: _Side, i: int, j: int, ids: dict[int, int]) -> dict:
    original, b = sa.values[i], sb.values[j]
    if sa.names[i] != sb.names[j]:
        return {"change": "replaced", "a": i, "b": j, "type": [sa.names[i], sb.names[j]]}
    a = _as_in_b(original, ids)
    if sa.names[i] == "CreateProgram":
        pa, pb = a.pop("program", {}), b.pop("program", {})
        changes = _changes(a, b) + _program_changes(pa, pb)
        b["program"] = pb
    else:
        changes = _changes(a, b)
    for change in changes:  # an id that differs is shown as a numbers it
        if change["field"] in _ID_FIELDS:
            change["a"] = original[change["field"]]
    entry = {"change": "changed", "a": i, "b": j, "type": sa.names[i], "fields": changes}
    kind = sa.binary.commands[i].cmdType
    goldens = [f for f in changes if f["field"].split(".")[0] in _GOLDEN_ATTRS]
    if goldens and set(blob_attrs(kind)) & set(_GOLDEN_ATTRS):
        ca, cb = sa.binary.commands[i].cmd, sb.binary.commands[j].cmd
        if ca.golden and cb.golden:
            entry["golden"] = _golden_error(sa, sb, ca, cb)
    return entry


def _identity(side: _Side, i: int) -> str:
    """What a command is, whatever changed in it: its type, and the name of the buffer or
    program it creates, or of the buffer it writes or reads."""
    value, kind = side.values[i], side.names[i]
    if kind == "CreateBuffer":
        return f"{kind}:{(value.get('desc') or {}).get('name')}"
    if kind == "CreateProgram":
        return f"{kind}:{(value.get('program') or {}).get('name')}"
    buffer = value.get("bufferId")
    if isinstance(buffer, int) and buffer in side.buffers:
        return f"{kind}:{side.buffers[buffer]}"
    return kind


def _pairs(
    sa: _Side, sb: _Side, range_a: range, range_b: range
) -> tuple[dict[int, int], list[tuple[range, range]]]:
    """In a changed stretch, the commands of `a` and `b` that are the same command changed,
    aligned by what each is (`_identity`: a buffer one compile made and another did not
    leaves the others paired by name); and the stretches still unaligned, whose commands
    `_moved` may pair across stretches and `_pairs_by_type` pairs in order."""
    ka = [_identity(sa, i) for i in range_a]
    kb = [_identity(sb, j) for j in range_b]
    pairs: dict[int, int] = {}
    loose = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ka, kb, False).get_opcodes():
        ra = range(range_a.start + i1, range_a.start + i2)
        rb = range(range_b.start + j1, range_b.start + j2)
        if tag == "equal":
            pairs.update(zip(ra, rb))
        else:
            loose.append((ra, rb))
    return pairs, loose


def _pairs_by_type(
    names_a: list[str], names_b: list[str], in_a: list[int], in_b: list[int]
) -> dict[int, int]:
    """In an unaligned stretch, each command of `a` (`in_a`) paired with the next unpaired
    command of `b` (`in_b`) of the same type, in order (the rest were removed or added)."""
    pairs, at = {}, 0
    for i in in_a:
        for k in range(at, len(in_b)):
            if names_b[in_b[k]] == names_a[i]:
                pairs[i], at = in_b[k], k + 1
                break
    return pairs


def _moved(sa: _Side, sb: _Side, loose: list[tuple[range, range]]) -> dict[int, int]:
    """Commands of unaligned stretches that are one command moved: the same named buffer
    or program created, written or read by one command among the unaligned of each side
    (two compiles at other presets create a weight at another place among the
    intermediates, so its commands fall in another stretch)."""

    def once(side: _Side, ranges: list[range]) -> dict[str, int]:
        found: dict[str, int] = {}
        for r in ranges:
            for i in r:
                key = _identity(side, i)
                if ":" in key:
                    found[key] = -1 if key in found else i
        return {k: i for k, i in found.items() if i >= 0}

    in_a, in_b = once(sa, [ra for ra, _ in loose]), once(sb, [rb for _, rb in loose])
    return {i: in_b[key] for key, i in in_a.items() if key in in_b}


def _fingerprint_changes(a: LightBinary, b: LightBinary, partner: dict[int, int]) -> list[dict]:
    """Kernel outputs whose fingerprints differ between commands that line up, from either
    side (one that only one side has is a difference too), and fingerprints that name a
    command their binary does not have (`None` for the side that has no such print)."""

    def placed(binary: LightBinary) -> dict[int, dict[tuple[int, int], int]]:
        out: dict[int, dict[tuple[int, int], int]] = {}
        for f in binary.fingerprints:
            out.setdefault(f.command, {})[(f.kernel, f.output)] = f.stats.hash
        return out

    in_a, in_b = placed(a), placed(b)
    out = []
    for i, j in partner.items():
        mine, theirs = in_a.get(i, {}), in_b.get(j, {})
        for kernel, output in sorted(mine.keys() | theirs.keys()):
            if mine.get((kernel, output)) != theirs.get((kernel, output)):
                out.append({"a": i, "b": j, "kernel": kernel, "output": output})
    for side, prints, count in (("a", in_a, len(a.commands)), ("b", in_b, len(b.commands))):
        for command in sorted(c for c in prints if not 0 <= c < count):
            for kernel, output in sorted(prints[command]):
                other = "b" if side == "a" else "a"
                out.append({side: command, other: None, "kernel": kernel, "output": output})
    return out


def _payload_changes(sa: _Side, sb: _Side, partner: dict[int, int]) -> list[dict]:
    """Blobs that commands lining up name by one hash and size, checked to hold one payload
    (BlobTable.same_payload: cheap where they are stored as the same bytes). A payload that
    does not match its recorded hash makes its binary unreadable, naming it: a corrupt copy
    of a binary is not equal to it. Two that match their hashes and still differ (a hash
    collision) are a difference."""
    out, seen = [], set()
    for i, j in partner.items():
        ca, cb = sa.binary.commands[i], sb.binary.commands[j]
        if ca.cmdType != cb.cmdType:
            continue
        for attr in blob_attrs(ca.cmdType):
            ia, ib = getattr(ca.cmd, attr), getattr(cb.cmd, attr)
            named = sa.values[i].get(attr)
            if not isinstance(named, dict) or named != sb.values[j].get(attr) or (ia, ib) in seen:
                continue
            seen.add((ia, ib))
            try:
                same = sa.binary.blobs.same_payload(ia, sb.binary.blobs, ib)
            except InvalidBinaryError:
                sa.read(ia), sb.read(ib)  # the side that cannot give its payload says so
                raise
            if not same:
                out.append({"a": i, "b": j, "field": attr})
    return out


def diff(a: LightBinary, b: LightBinary) -> dict:
    """Every difference between `a` and `b` as a JSON-ready dict; `equal` says whether
    there is any (creation metadata aside)."""
    sa, sb = _Side.of(a, "A"), _Side.of(b, "B")
    # The sample fingerprints' statistics cover, where both binaries have fingerprints
    # (another sample makes their statistics incomparable; their hashes are compared below).
    names = _HEADER + (("fingerprint_sample",) if a.fingerprints and b.fingerprints else ())
    header = [
        {"field": name, "a": getattr(a, name), "b": getattr(b, name)}
        for name in names
        if plain(getattr(a, name)) != plain(getattr(b, name))
    ]
    # Ids are compared as renumbered: a binary whose ids break the rules (what `mnrt verify`
    # refuses) could otherwise equal a valid one. Blob checksums are left to the payloads'
    # comparison below, which reads them where hashes differ.
    verdicts = _verdict(a), _verdict(b)
    if verdicts[0] != verdicts[1]:
        header.append({"field": "verify", "a": verdicts[0], "b": verdicts[1]})
    commands = []
    partner: dict[int, int] = {}  # command of a -> the command of b it lines up with
    matcher = difflib.SequenceMatcher(None, sa.keys, sb.keys, autojunk=False)
    stretches = []
    same = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            same += i2 - i1
            partner.update(zip(range(i1, i2), range(j1, j2)))
            continue
        pairs, loose = _pairs(sa, sb, range(i1, i2), range(j1, j2))
        stretches.append((range(i1, i2), range(j1, j2), pairs, loose))
    moved = _moved(sa, sb, [r for *_, loose in stretches for r in loose])
    moved_b = set(moved.values())
    for _, _, pairs, loose in stretches:
        for ra, rb in loose:
            pairs.update(
                _pairs_by_type(
                    sa.names, sb.names,
                    [i for i in ra if i not in moved],
                    [j for j in rb if j not in moved_b],
                )
            )  # fmt: skip
        partner.update(pairs)
    partner.update(moved)
    ids = _id_map(sa, sb, partner)
    io = [
        {
            "field": name, "a": ids_a, "b": ids_b,
            "names": [[sa.buffers.get(i, str(i)) for i in ids_a],
                      [sb.buffers.get(j, str(j)) for j in ids_b]],
        }
        for name, ids_a, ids_b in zip(("inputs", "outputs"), a.io_ids, b.io_ids)
        if [ids.get(i, f"a:{i}") for i in ids_a] != list(ids_b)
    ]  # fmt: skip
    for range_a, range_b, pairs, _ in stretches:
        paired_b = set(pairs.values()) | moved_b
        for i in range_a:
            if i not in pairs and i not in moved:
                commands.append({"change": "removed", "a": i, "b": None, "type": sa.names[i],
                                 "value": sa.values[i]})  # fmt: skip
                continue
            entry = _pair(sa, sb, i, pairs[i] if i in pairs else moved[i], ids)
            if i in moved:  # a difference in itself, fields or none
                commands.append({**entry, "moved": True})
            elif entry["change"] == "changed" and not entry["fields"]:
                same += 1  # the same command of objects numbered otherwise
            else:
                commands.append(entry)
        commands += [
            {"change": "added", "a": None, "b": j, "type": sb.names[j], "value": sb.values[j]}
            for j in range_b
            if j not in paired_b
        ]
    differing = _fingerprint_changes(a, b, partner)
    payloads = _payload_changes(sa, sb, partner)
    return {
        "equal": not (header or io or commands or differing or payloads),
        "a": {"path": str(a.path) if a.path else None, "commands": len(a), "blobs": len(a.blobs)},
        "b": {"path": str(b.path) if b.path else None, "commands": len(b), "blobs": len(b.blobs)},
        "header": header,
        "io": io,
        "commands_equal": same,
        "commands": commands,
        "payloads": payloads,
        "fingerprints": {"a": len(a.fingerprints), "b": len(b.fingerprints), "differ": differing},
    }


def _verdict(binary: LightBinary) -> str:
    """What `mnrt verify` says of a binary, blob checksums aside: OK, or why not."""
    try:
        validate(binary, blobs=False)
    except InvalidBinaryError as e:
        return str(e)
    return "OK"


def to_text(d: dict, limit: int = 200) -> str:
    """The diff for a terminal: one line per changed command (at most `limit`), fields
    indented below it (at most `limit` a command: a program of two compiles of a large
    model differs in hundreds of kernels)."""
    if d["equal"]:
        return summary(d)
    lines = []
    for h in d["header"]:
        lines.append(f"~ {h['field']}: {h['a']} -> {h['b']}")
    for h in d["io"]:  # by the buffers' names: their ids differ whenever one moved
        named_a, named_b = (", ".join(names) for names in h["names"])
        lines.append(f"~ {h['field']}: [{named_a}] -> [{named_b}]")
    for c in d["commands"][:limit]:
        if c["change"] == "removed":
            lines.append(f"- [{c['a']}] {c['type']} {_short(c['value'])}")
        elif c["change"] == "added":
            lines.append(f"+ [{c['b']}] {c['type']} {_short(c['value'])}")
        elif c["change"] == "replaced":
            lines.append(f"! [{c['a']}] {c['type'][0]} -> [{c['b']}] {c['type'][1]}")
        else:
            moved = " (moved)" if c.get("moved") else ""
            lines.append(f"~ [{c['a']}] -> [{c['b']}] {c['type']}{moved}")
            lines += [_field_line(f) for f in c["fields"][:limit]]
            if len(c["fields"]) > limit:
                lines.append(
                    f"    ... and {len(c['fields']) - limit} more changed fields (see --json)"
                )
            g = c.get("golden")
            if g and g.get("comparable"):
                lines.append(
                    f"    golden by value: max_abs_err={g['max_abs_err']:.3g} "
                    f"max_rel_err={g['max_rel_err']:.3g}, {g['mismatched']} of "
                    f"{g['elements']} elements differ"
                )
    if len(d["commands"]) > limit:
        lines.append(f"... and {len(d['commands']) - limit} more changed commands (see --json)")
    for p in d["payloads"]:
        lines.append(f"~ [{p['a']}] -> [{p['b']}] {p['field']}: same hash, other payload")
    if d["fingerprints"]["differ"]:
        lines.append(f"~ {_fingerprints(d['fingerprints'], detail=True)}")
    lines.append(summary(d))
    return "\n".join(lines)


def _field_line(f: dict) -> str:
    """One changed field, indented; a kernel only one program has as `- ` or `+ ` and the
    kernel as it would be written (`conv2d(x, w) -> y`), not as a table."""
    if _WHOLE_KERNEL.fullmatch(f["field"]) and (f["a"] is None) != (f["b"] is None):
        sign, kernel = ("- ", f["a"]) if f["b"] is None else ("+ ", f["b"])
        return f"    {sign}{f['field']} {_kernel_text(kernel)}"
    return f"    {f['field']}: {_short(f['a'])} -> {_short(f['b'])}"


def _kernel_text(kernel: Any) -> str:
    if not isinstance(kernel, dict):
        return _short(kernel)
    names = lambda key: ", ".join(map(str, kernel.get(key) or []))  # noqa: E731
    return _short(f"{kernel.get('op')}({names('inputs')}) -> {names('outputs')}")


def summary(d: dict) -> str:
    """The diff in one line: `mnrt diff`'s last, and the dashboard's."""
    if d["equal"]:
        return (
            f"equal: {_count(d['a']['commands'], 'command')}, {_count(d['a']['blobs'], 'blob')} "
            "(creation metadata aside)"
        )
    changed, same = len(d["commands"]), d["commands_equal"]
    moved = sum(1 for c in d["commands"] if c.get("moved"))
    parts = [
        f"different: {_count(changed, 'command')} {'differs' if changed == 1 else 'differ'}"
        f"{f' ({moved} moved)' if moved else ''}, {same} {'is' if same == 1 else 'are'} "
        f"equal ({d['a']['commands']} and {d['b']['commands']} commands)"
    ]
    if d["header"] or d["io"]:
        n = len(d["header"]) + len(d["io"])
        parts.append(f"{_count(n, 'header/io field')} {'differs' if n == 1 else 'differ'}")
    if d["payloads"]:
        n = len(d["payloads"])
        parts.append(f"{_count(n, 'payload')} {'differs' if n == 1 else 'differ'} under one hash")
    if d["fingerprints"]["differ"]:
        parts.append(_fingerprints(d["fingerprints"], detail=False))
    return "; ".join(parts)


def _fingerprints(f: dict, detail: bool) -> str:
    """How the kernel fingerprints differ (`f`: the diff's "fingerprints")."""
    if not (f["a"] and f["b"]):  # one was captured without them
        side, count = ("A", f["a"]) if f["a"] else ("B", f["b"])
        return f"only {side} records kernel fingerprints ({count})"
    n = len(f["differ"])
    of = f" (of {f['a']} and {f['b']})" if detail else ""
    return f"{_count(n, 'kernel fingerprint')} {'differs' if n == 1 else 'differ'}{of}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _short(value: Any, width: int = 120) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 3] + "..."
