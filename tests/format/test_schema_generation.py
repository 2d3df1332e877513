"""The generated format code is current, and LAYOUT agrees with what flatc generated."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash

from mnrt.format import schema_info
from mnrt.format.schema_info import FORMAT_VERSION, KNOWN_SCHEMAS, LAYOUT, SCHEMA_HASH

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gen_format.py"
FB_DIR = ROOT / "mnrt" / "format" / "fb"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_format", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def test_schema_hash_matches_the_schema_sources():
    h = xxhash.xxh3_64()
    for path in sorted((ROOT / "schema").glob("*.fbs"), key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes().replace(b"\r\n", b"\n"))
    assert h.intdigest() == SCHEMA_HASH


def test_current_version_is_recorded_with_the_current_hash():
    assert KNOWN_SCHEMAS[FORMAT_VERSION] == SCHEMA_HASH
    assert max(KNOWN_SCHEMAS) == FORMAT_VERSION
    assert gen.FORMAT_VERSION == FORMAT_VERSION


def test_regenerating_reproduces_the_committed_files(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    out_fb = tmp_path / "mnrt" / "format" / "fb"
    generated = sorted(p.name for p in out_fb.glob("*.py"))
    assert generated == sorted(p.name for p in FB_DIR.glob("*.py"))
    for name in generated:
        assert (out_fb / name).read_bytes() == (FB_DIR / name).read_bytes(), name
    assert not (tmp_path / "mnrt" / "__init__.py").exists()
    assert not (tmp_path / "mnrt" / "format" / "__init__.py").exists()
    written = (tmp_path / "mnrt" / "format" / "schema_info.py").read_bytes()
    assert written == Path(schema_info.__file__).read_bytes()


def test_check_mode_reports_the_tree_current():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True)
    assert result.returncode == 0, result.stderr


def test_changing_a_recorded_versions_schema_is_refused():
    with pytest.raises(gen.GenerationError, match="Bump the minor"):
        gen.merge_known_schemas({(1, 0): 1}, (1, 0), 2)
    with pytest.raises(gen.GenerationError, match="older"):
        gen.merge_known_schemas({(1, 1): 1}, (1, 0), 2)
    assert gen.merge_known_schemas({(1, 0): 1}, (1, 1), 2) == {(1, 0): 1, (1, 1): 2}
    assert gen.merge_known_schemas({(1, 0): 1}, (1, 0), 1) == {(1, 0): 1}


def test_older_versions_survive_a_rewrite(tmp_path):
    known = {(0, 9): 0x1234, (1, 0): SCHEMA_HASH}
    text = gen.render_schema_info(SCHEMA_HASH, (1, 0), known, LAYOUT)
    path = tmp_path / "schema_info.py"
    path.write_text(text)
    assert gen.read_known_schemas(path) == known
    namespace: dict = {}
    exec(compile(text, str(path), "exec"), namespace)
    assert namespace["LAYOUT"] == LAYOUT
    assert namespace["KNOWN_SCHEMAS"] == known


class _RecordingBuilder:
    """Stands in for flatbuffers.Builder and records the slot each Add function writes."""

    def __init__(self):
        self.slots = []

    def __getattr__(self, name):
        assert name.startswith("Prepend") and name.endswith("Slot"), name
        return lambda slot, *_: self.slots.append(slot)


class _RecordingStart:
    """Stands in for flatbuffers.Builder and records how many slots a table starts with."""

    def StartObject(self, slots):
        self.slots = slots


def test_layout_slots_match_flatc():
    for table, spec in LAYOUT["tables"].items():
        module = importlib.import_module(f"mnrt.format.fb.{table}")
        adders = {
            name[len(table) + 3 :]: fn
            for name, fn in vars(module).items()
            if name.startswith(f"{table}Add")
        }
        live = [f for f in spec["fields"] if not f["deprecated"]]
        assert sorted(adders) == sorted(_camel(f["name"]) for f in live), table
        for field in live:
            builder = _RecordingBuilder()
            adders[_camel(field["name"])](builder, 0)
            assert builder.slots == [field["slot"]], (table, field["name"])
        start = _RecordingStart()
        getattr(module, f"{table}Start")(start)
        assert start.slots == max((f["slot"] for f in spec["fields"]), default=-1) + 1


def test_layout_enums_unions_and_structs_match_flatc():
    for name, spec in LAYOUT["enums"].items():
        cls = getattr(importlib.import_module(f"mnrt.format.fb.{name}"), name)
        generated = {k.rstrip("_"): v for k, v in vars(cls).items() if not k.startswith("__")}
        assert generated == spec["values"]
    for name, spec in LAYOUT["unions"].items():
        cls = getattr(importlib.import_module(f"mnrt.format.fb.{name}"), name)
        members = {k: v for k, v in vars(cls).items() if not k.startswith("__")}
        assert members == {"NONE": 0} | {m: i + 1 for i, m in enumerate(spec["members"])}
    for name, spec in LAYOUT["structs"].items():
        cls = getattr(importlib.import_module(f"mnrt.format.fb.{name}"), name)
        assert cls.SizeOf() == spec["size"]


def test_parser_layout_rules(tmp_path):
    (tmp_path / "a.fbs").write_text(
        """
        namespace x.y; /* block
        comment */
        enum E : short { A = -2, B, C = 7 }
        struct Inner { b: ubyte; d: double; }
        struct Outer { s: short; i: Inner; e: E; }
        union U { T1, T2 }
        table T1 { x: float = nan; y: E = B; old: int (deprecated); }
        table T2 { u: U; v: [Outer]; w: [T1] (required); o: Outer; }
        root_type T2;
        """
    )
    layout = gen.parse_schema([tmp_path / "a.fbs"])
    assert layout["enums"]["E"]["values"] == {"A": -2, "B": -1, "C": 7}
    assert layout["enums"]["E"]["signed"] is True
    inner, outer = layout["structs"]["Inner"], layout["structs"]["Outer"]
    assert (inner["size"], inner["align"]) == (16, 8)
    assert [f["offset"] for f in outer["fields"]] == [0, 8, 24]
    assert (outer["size"], outer["align"]) == (32, 8)
    t1, t2 = layout["tables"]["T1"]["fields"], layout["tables"]["T2"]["fields"]
    assert [(f["name"], f["slot"], f["kind"]) for f in t2] == [
        ("u_type", 0, "union_type"),
        ("u", 1, "union"),
        ("v", 2, "vector"),
        ("w", 3, "vector"),
        ("o", 4, "struct"),
    ]
    assert t2[2]["element"] == "struct" and t2[2]["size"] == 32 and t2[2]["align"] == 8
    assert t2[3]["required"] and t2[3]["element"] == "table"
    assert t1[2]["deprecated"] and t1[2]["slot"] == 2
    assert layout["file_identifier"] is None


@pytest.mark.parametrize(
    "source",
    [
        "namespace a; table T { x: int (id: 1); } root_type T;",
        "namespace a; table T { x: [int:4]; } root_type T;",
        "namespace a; table T { x: Missing; } root_type T;",
        "namespace a; table T { x: int (required); } root_type T;",
        "namespace a; table T { x: int; x: int; } root_type T;",
        "namespace a; enum E : float { A } table T { e: E; } root_type T;",
        "namespace a; enum E : ubyte { A = 300 } table T { e: E; } root_type T;",
        "namespace a; union U { T } table T { u: [U]; } root_type T;",
        "namespace a; rpc_service S {} table T {} root_type T;",
        "namespace a; table T {} root_type Nope;",
        "namespace a; struct S { a: S; } table T {} root_type T;",
        "namespace a; table T { x: int } root_type T;",
    ],
)
def test_parser_rejects_what_it_does_not_support(tmp_path, source):
    (tmp_path / "a.fbs").write_text(source)
    with pytest.raises(gen.GenerationError):
        gen.parse_schema([tmp_path / "a.fbs"])
