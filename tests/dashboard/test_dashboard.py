"""The dashboard's server, pages, export and CLI, without a browser (Starlette's test
client): every page for a codegen_dir, a multi-device binary and a run report; files outside
PATH refused; missing and corrupt files shown as a page, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from binaries import three_buffers
from cli_harness import invoke_cli
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

from starlette.testclient import TestClient

import mnrt
from mnrt.compiler.models import MODELS
from mnrt.dashboard import (
    PAGES,
    ArtifactMissingError,
    Artifacts,
    PathRefusedError,
    create_app,
    export,
    open_dashboard,
)
from mnrt.dashboard.app import _number
from mnrt.dashboard.pages.binary import build
from mnrt.dashboard.pages.common import kernels
from mnrt.dashboard.pages.perf import ALL, stats
from mnrt.dashboard.serve import bind
from mnrt.errors import InvalidArgumentError
from mnrt.replay.diff import diff, summary

ROOT = Path(__file__).resolve().parents[2]


def client(path: Path, other: Path | None = None) -> TestClient:
    return TestClient(create_app(open_dashboard(path, other)))


def rows(html: str, table: str) -> int:
    body = html.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
    return body.split("<tbody>", 1)[1].count("<tr")


def test_every_page_of_a_codegen_dir(cnn_dir):
    c = client(cnn_dir)
    report = json.loads((cnn_dir / "report.json").read_text())
    for slug in PAGES:
        r = c.get(f"/{slug}.html")
        assert r.status_code == 200, (slug, r.text[:500])
        assert "cannot be shown" not in r.text
    assert c.get("/").text == c.get("/summary.html").text
    assert rows(c.get("/compile").text, "phases") == len(report["phases"])
    ran = [x for x in report["layers"] if not x.get("elided")]  # the kernels: one row each
    assert rows(c.get("/layers").text, "layers") == len(ran) == len(report["layers"]) - 1
    assert rows(c.get("/nodes").text, "nodes") == len(report["layers"])
    summary = c.get("/summary").text
    assert "probs" in summary and "passed" in summary  # the golden and its accuracy check
    # an output the compile's accuracy check does not cover is not checked, not failed
    assert "FAILED" not in summary and "not checked here" in summary
    assert 'src="netron/index.html?url=../files/model.onnx' in c.get("/graph").text


def test_a_phases_account_shows_its_figures(tmp_path):
    """What a phase's account says (the scheduler's choice and spills; at O2 the regions
    mixed precision kept in half and the casts dropped) shows beside it."""
    builder, inputs = MODELS["cnn"]()
    with mnrt.Context() as ctx:
        ctx.compile(builder, inputs, codegen_dir=tmp_path / "o2", options={"option_json": "O2"})
    report = json.loads((tmp_path / "o2" / "report.json").read_text())
    page = client(tmp_path / "o2").get("/compile").text
    accounts = {p["name"]: p["account"] for p in report["phases"] if "account" in p}
    assert {"schedule", "half_where_it_pays"} <= set(accounts)
    row = page.split("<td>half_where_it_pays</td>", 1)[1].split("</tr>", 1)[0]
    for key, value in accounts["half_where_it_pays"].items():
        assert f"{key} {_number(value)}" in row
    assert "scheduler spill_opt" in page


def test_a_cache_hits_phases_show_as_cached_and_count_once(tmp_path):
    builder, inputs = MODELS["cnn"]()
    cache = mnrt.CacheOptions(tmp_path / "cache")
    with mnrt.Context() as ctx:
        ctx.compile(builder, inputs, cache_options=cache)
        ctx.compile(builder, inputs, codegen_dir=tmp_path / "hit", cache_options=cache)
    page = client(tmp_path / "hit").get("/compile").text
    report = json.loads((tmp_path / "hit" / "report.json").read_text())
    assert rows(page, "phases") == len(report["phases"])
    assert "ok (hit)" in page and "ok (cached)" in page
    own = sum(p["seconds"] for p in report["phases"] if not p.get("cached"))
    assert f"{_number(own)} s in all" in page


def test_layers_carry_the_compile_reports_costs(cnn_dir):
    art = Artifacts(cnn_dir)
    report = json.loads((cnn_dir / "report.json").read_text())
    got = kernels(art)
    # the layers that run a kernel: the cnn's reshape lies in its input's buffer and runs none
    ran = [layer for layer in report["layers"] if not layer.get("elided")]
    assert [x["op"] for x in report["layers"] if x.get("elided")] == ["reshape"]
    assert [k["name"] for k in got] == [layer["name"] for layer in ran]
    for k, layer in zip(got, ran):
        assert k["op"] == layer["op"]
        assert k["time_s"] == pytest.approx(layer["device_time_s"], rel=1e-6)
        assert k["flops"] == pytest.approx(layer["flops"])
        assert 0.0 <= k["utilisation"] <= 1.0
        assert k["energy_j"] > 0


def test_perf_stats_all_rows_are_the_totals(cnn_dir):
    ks = kernels(Artifacts(cnn_dir))
    table = stats(ks)
    top = table[0]
    assert (top["op"], top["attribute"], top["value"]) == (ALL, ALL, ALL)
    assert top["count"] == len(ks)
    assert top["time_s"] == pytest.approx(sum(k["time_s"] for k in ks))
    per_op = [s for s in table if s["op"] != ALL and s["attribute"] == ALL]
    assert sum(s["count"] for s in per_op) == len(ks)
    assert sum(s["share"] for s in per_op) == pytest.approx(1.0)
    conv = [s for s in table if s["op"] == "conv2d" and s["attribute"] == "stride"]
    assert sum(s["count"] for s in conv) == sum(k["op"] == "conv2d" for k in ks)


def test_multi_device_binary(pipeline):
    c = client(pipeline)
    for slug in PAGES:
        assert c.get(f"/{slug}").status_code == 200, slug
    timeline = c.get("/timeline").text
    assert rows(timeline, "devices") == 4
    for row in ("device 1 / link in", "copy arrows", "event arrows", "of it while idle (J)"):
        assert row in timeline
    binary = c.get("/binary").text
    assert "CopyBuffer" in binary and "WaitEvent" in binary
    assert "no layout data in this binary" in c.get("/layouts").text
    trace = c.get("/trace.json")
    assert trace.headers["content-disposition"].startswith("attachment")
    assert any(e.get("cat") == "copy" for e in trace.json()["traceEvents"])


def test_a_run_reports_locate_findings_are_on_its_summary(tmp_path):
    from binaries import perturbed, three_device_capture

    from mnrt.replay.plan import validate

    binary = three_device_capture(fingerprints=True)
    x = next(g for g, b in validate(binary, blobs=False).buffers.items() if b.name == "x")
    path, report = tmp_path / "bad.mnlb", tmp_path / "r.json"
    perturbed(binary, x).save(path)
    cmd = [sys.executable, "-m", "mnrt", "run", str(path), "--locate", "--report", str(report),
           "--locate-dir", str(tmp_path / "loc")]  # fmt: skip
    assert subprocess.run(cmd, capture_output=True).returncode == 1
    summary = client(report).get("/summary").text
    assert "locate: first divergent kernel" in summary and "&#39;exp&#39; (wrong)" in summary
    assert str(tmp_path / "loc") in summary


def test_a_run_reports_race_is_on_its_summary(tmp_path):
    from binaries import RELAY_N, relay

    path, report = tmp_path / "racy.mnlb", tmp_path / "r.json"
    relay(ordered=False).save(path)
    wrong = {"o": np.zeros((4, RELAY_N), np.float32)}
    report.write_text(mnrt.replay(path, expected=wrong).to_json())
    summary = client(report).get("/summary").text
    assert "race between queues" in summary and "queues race" in summary
    # each golden row carries its check's result, matched by command (reads name buffers);
    # the --expected check of the last read is a row of its own
    checks = json.loads(report.read_text())["checks"]
    assert [c["name"] for c in checks] == ["o", "o#2", "o#3", "o#4"]
    assert rows(summary, "goldens") == 4 and "not checked here" not in summary
    results = [c["passed"] for c in checks]
    assert summary.count(">FAILED<") == results.count(False) >= 1
    assert summary.count(">passed<") == results.count(True)
    table = summary.split('<table id="goldens">', 1)[1]
    assert [table.index(f"<td>{c['name']}</td>") for c in checks] == sorted(
        table.index(f"<td>{c['name']}</td>") for c in checks
    )


def test_run_report(tmp_path, pipeline):
    report = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "mnrt", "run", str(pipeline), "--report", str(report)]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    c = client(report)
    for slug in PAGES:
        assert c.get(f"/{slug}").status_code == 200, slug
    assert "PASS" in c.get("/summary").text
    # the binary the report names is gone: totals only, said plainly
    doc = json.loads(report.read_text())
    assert "while devices idle" in c.get("/summary").text
    doc["binary"] = str(tmp_path / "gone.mnlb")
    # a report of an mnrt before idle energy: the page says it has none
    del doc["modelled"]["idle_energy_j"]
    for d in doc["modelled"]["devices"]:
        del d["idle_energy_j"]
    report.write_text(json.dumps(doc))
    c = client(report)
    timeline = c.get("/timeline").text
    assert "is not there" in timeline and rows(timeline, "devices") == 4
    assert '<td class="n">-</td>' in timeline
    assert c.get("/binary").status_code == 404


def test_a_distributed_or_folded_runs_report_says_where_it_ran(tmp_path, pipeline):
    """Rank 0's report of `mpiexec -n 2 mnrt run --mpi` says it holds every rank's results;
    a run folded onto fewer devices shows the makespan as run beside the captured one."""
    from mpi_harness import mnrt_command, run_mpi

    report = tmp_path / "r.json"
    r = run_mpi(2, *mnrt_command(), "run", pipeline, "--mpi", "--report", report)
    assert r.returncode == 0, r.stderr
    summary = client(report).get("/summary").text
    assert "2 MPI ranks; this is rank 0&#39;s report (every rank&#39;s results)" in summary
    assert "as run, folded" not in summary
    cmd = [*mnrt_command(), "run", str(pipeline), "--devices", "1", "--report", str(report)]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    summary = client(report).get("/summary").text
    assert "modelled makespan as run, folded (s)" in summary and "MPI ranks" not in summary


@pytest.mark.parametrize(
    "url",
    [
        "/files/..%2F..%2Fetc%2Fpasswd",
        "/files/%2Fetc%2Fpasswd",
        "/files//etc/passwd",
        "/files/a/../../outside.txt",
        "/files/%2e%2e/outside.txt",
        "/files/link_out",
        "/netron/..%2F..%2F__init__.py",
        "/static/..%2Fapp.py",
    ],
)
def test_paths_outside_path_are_refused(tmp_path, cnn_dir, url):
    folder = tmp_path / "cg"
    shutil.copytree(cnn_dir, folder)
    (tmp_path / "outside.txt").write_text("secret")
    os.symlink(tmp_path / "outside.txt", folder / "link_out")
    r = client(folder).get(url)
    assert r.status_code in (403, 404)
    assert "secret" not in r.text and "root:" not in r.text
    assert any(why in r.text for why in ("only files under", "not a", "no such", "no page"))


def test_files_under_path_are_served_and_a_file_path_serves_itself_only(cnn_dir, pipeline):
    c = client(cnn_dir)
    assert c.get("/files/option.json").json() == json.loads((cnn_dir / "option.json").read_text())
    assert c.get("/files/nothing.json").status_code == 404
    c = client(pipeline)
    assert c.get("/files/pipeline.mnlb").content == pipeline.read_bytes()
    assert c.get("/files/mlp.mnlb").status_code == 403  # its neighbour is not PATH


def test_corrupt_and_missing_files_are_pages_not_tracebacks(tmp_path, cnn_dir):
    folder = tmp_path / "cg"
    shutil.copytree(cnn_dir, folder)
    (folder / "report.json").write_text("{not json")
    (folder / "model.mnlb").write_bytes(b"\0\0\0\0MNLB" + b"\xff" * 64)
    c = client(folder)
    for slug in ("summary", "compile", "binary"):
        r = c.get(f"/{slug}")
        assert r.status_code == 422, slug
        assert "cannot be shown" in r.text and "Traceback" not in r.text
    assert "report.json" in c.get("/compile").text
    (folder / "model.mnlb").unlink()
    r = c.get("/layers")
    assert r.status_code in (404, 422) and "Traceback" not in r.text
    assert client(folder).get("/binary").status_code == 404
    assert "no page" in c.get("/nosuchpage").text


@pytest.mark.parametrize("name", ["report.json", "layout_plan.json", "somebody_elses.json"])
def test_json_nested_too_deeply_is_a_page_not_a_traceback(tmp_path, cnn_dir, name):
    # json raises RecursionError for it, not the ValueError of other malformed JSON: every
    # page that read the file answered 500 with a traceback.
    folder = tmp_path / "cg"
    shutil.copytree(cnn_dir, folder)
    (folder / name).write_text("[" * 100_000 + "]" * 100_000)
    c = client(folder)
    for slug in ("summary", "compile", "layers", "perf", "nodes", "timeline", "layouts"):
        r = c.get(f"/{slug}")
        assert r.status_code in (200, 422) and "Traceback" not in r.text, (slug, r.status_code)
        assert r.status_code == 200 or "cannot be shown" in r.text, slug


def _first_kernel(doc: dict) -> dict:
    return next(e for e in doc["traceEvents"] if "kernel" in (e.get("args") or {}))


# A document mnrt wrote, edited into another shape: (file, edit, a page that reads the
# field, what the page must say). Each of these pages answered 500 with a TypeError.
EDITS = {
    "layers not a list": (
        "report.json",
        lambda d: d.update(layers=7),
        "nodes",
        "layers is a number, not an array",
    ),
    "a layer's time a string": (
        "report.json",
        lambda d: d["layers"][0].update(device_time_s="3 us"),
        "nodes",
        "layers[0].device_time_s is a string, not a number or null",
    ),
    "a layer's outputs null": (
        "report.json",
        lambda d: d["layers"][2].update(outputs=None),
        "layouts",
        "layers[2].outputs is null, not an array",
    ),
    "a layer's name an object": (
        "report.json",
        lambda d: d["layers"][1].update(name={"a": 1}),
        "layers",
        "layers[1].name is an object",
    ),
    "accuracy a list": (
        "report.json",
        lambda d: d["phases"][-2].update(accuracy=[1]),
        "summary",
        ".accuracy is an array, not an object",
    ),
    "an account a list": (
        "report.json",
        lambda d: next(p for p in d["phases"] if "account" in p).update(account=[1]),
        "compile",
        ".account is an array, not an object",
    ),
    "total a string": (
        "report.json",
        lambda d: d.update(total="1 s"),
        "summary",
        "total is a string",
    ),
    "node attributes a list": (
        "graph.json",
        lambda d: d["nodes"][0].update(attrs=[["k", 1]]),
        "nodes",
        "nodes[0].attrs is an array, not an object",
    ),
    "checks an object": (
        "run_report.json",
        lambda d: d.update(checks={}),
        "summary",
        "checks is an object",
    ),
    "devices a number": (
        "run_report.json",
        lambda d: d["modelled"].update(devices=1),
        "summary",
        "modelled.devices is a number",
    ),
    "a kernel's flops a string": (
        "trace.json",
        lambda d: _first_kernel(d)["args"].update(flops="many"),
        "layers",
        ".args.flops is a string, not a number",
    ),
    "a kernel's outputs numbers": (
        "trace.json",
        lambda d: _first_kernel(d)["args"].update(outputs=[1, 2]),
        "perf",
        ".args.outputs[0] is a number, not a string",
    ),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_document_edited_into_another_shape_is_a_page_naming_the_field(
    tmp_path, profiled_dir, edit
):
    name, change, slug, said = EDITS[edit]
    folder = tmp_path / "cg"
    shutil.copytree(profiled_dir, folder)
    assert client(folder).get(f"/{slug}").status_code == 200  # as mnrt wrote it
    doc = json.loads((folder / name).read_text())
    change(doc)
    (folder / name).write_text(json.dumps(doc))
    r = client(folder).get(f"/{slug}")
    assert r.status_code == 422, r.text[-600:]
    assert name in r.text and said in r.text and "is not as mnrt writes it" in r.text


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
# Fields of the documents the pages read, at every level they nest (see dashboard/shapes.py).
_PLACES = [
    ("report.json", ("layers",)),
    ("report.json", ("layers", 0)),
    ("report.json", ("layers", 0, "name")),
    ("report.json", ("layers", 0, "outputs")),
    ("report.json", ("layers", 0, "device_time_s")),
    ("report.json", ("phases", 0)),
    ("report.json", ("phases", -2, "accuracy")),
    ("report.json", ("phases", -2, "accuracy", "outputs")),
    ("report.json", ("total",)),
    ("report.json", ("layout",)),
    ("graph.json", ("nodes", 0)),
    ("graph.json", ("nodes", 0, "attrs")),
    ("graph.json", ("nodes", 0, "inputs")),
    ("run_report.json", ("checks",)),
    ("run_report.json", ("checks", 0)),
    ("run_report.json", ("modelled",)),
    ("run_report.json", ("modelled", "devices")),
    ("run_report.json", ("locate",)),
    ("trace.json", ("traceEvents", 0)),
    ("trace.json", ("traceEvents", 0, "args")),
]


@settings(max_examples=60, deadline=None)
@given(place=st.sampled_from(_PLACES), value=_JSON)
def test_no_edit_of_a_document_breaks_a_page(tmp_path_factory, profiled_dir, place, value):
    """Any JSON value in place of a field the pages read: each page is shown (200) or says
    which file is not as mnrt writes it (422), never a 500."""
    folder = tmp_path_factory.mktemp("edited") / "cg"
    shutil.copytree(profiled_dir, folder)
    name, keys = place
    doc = json.loads((folder / name).read_text())
    where = doc
    for key in keys[:-1]:
        where = where[key]
    where[keys[-1]] = value
    (folder / name).write_text(json.dumps(doc))
    c = client(folder)
    for slug in ("summary", "compile", "layers", "perf", "nodes", "layouts"):
        r = c.get(f"/{slug}")
        assert r.status_code in (200, 422), (slug, r.text[-600:])
        assert r.status_code == 200 or "is not as mnrt writes it" in r.text, r.text[-600:]


@pytest.mark.parametrize("depth", [400, 985])
def test_a_document_nested_deeper_than_a_page_shows_is_shown_as_json(tmp_path, cnn_dir, depth):
    # Each level of nested tables is several Python frames: a layout plan some hundreds
    # deep (which JSON parses) exhausted the stack, and the page answered 500.
    folder = tmp_path / "cg"
    shutil.copytree(cnn_dir, folder)
    (folder / "layout_plan.json").write_text('{"k": ' * depth + '"deepest"' + "}" * depth)
    r = client(folder).get("/layouts")
    assert r.status_code == 200
    assert "deepest" in r.text or "nested too deeply to show here" in r.text


def test_a_fifo_is_refused_not_waited_on(tmp_path, cnn_dir, fifo):
    """As PATH, or as the compile report a codegen_dir names (here a link to it): refused
    as not a regular file, where reading it waited for a writer."""
    code, out = invoke_cli("dashboard", fifo, "--export", tmp_path / "pages")
    assert code == 2 and "is not a regular file" in out and "Traceback" not in out
    folder = tmp_path / "cg"
    shutil.copytree(cnn_dir, folder)
    (folder / "report.json").unlink()
    (folder / "report.json").symlink_to(fifo)
    r = client(folder).get("/compile")
    assert r.status_code == 404 and "is not a regular file" in r.text


def statuses(html: str) -> list[str]:
    body = html.split('<table id="diff">', 1)[1].split("</table>", 1)[0]
    return [tr.split('"', 1)[0] for tr in body.split('<tr class="')[1:]]


def test_two_identical_binaries_are_shown_equal(chains):
    html = client(chains["a"], chains["a"]).get("/binary").text
    n = len(mnrt.LightBinary.load(chains["a"]))
    assert f'class="ok">equal: {n} commands' in html
    assert statuses(html) == ["equal"] * n
    assert 'id="diff-goldens"' not in html


@pytest.mark.parametrize("other", ["weight", "longer"])
def test_two_binaries_side_by_side_show_what_mnrt_diff_finds(chains, other):
    a, b = mnrt.LightBinary.load(chains["a"]), mnrt.LightBinary.load(chains[other])
    expected = diff(a, b)
    assert not expected["equal"]
    shown = build(Artifacts(chains["a"], chains[other]))["diff"]
    assert json.loads(shown["json"]) == json.loads(json.dumps(expected, default=str))
    # every command of each side in exactly one row, equal ones in order, changes as diff says
    laid = shown["rows"]
    assert sorted(r["a"]["index"] for r in laid if r["a"]) == list(range(len(a)))
    assert sorted(r["b"]["index"] for r in laid if r["b"]) == list(range(len(b)))
    equal = [(r["a"]["index"], r["b"]["index"]) for r in laid if r["status"] == "equal"]
    assert len(equal) == expected["commands_equal"] and equal == sorted(equal)
    changes = [r for r in laid if r["status"] != "equal"]
    assert [
        (r["status"], r["a"] and r["a"]["index"], r["b"] and r["b"]["index"]) for r in changes
    ] == [(c["change"], c["a"], c["b"]) for c in expected["commands"]]
    html = client(chains["a"], chains[other]).get("/binary").text
    assert f'class="bad">{summary(expected)}</span>' in html
    assert statuses(html) == [r["status"] for r in laid]
    if other == "weight":
        assert statuses(html).count("changed") == 1 and "data.hash: " in html
    else:
        golden = next(c for c in expected["commands"] if c.get("golden"))["golden"]
        assert golden["comparable"] and golden["max_abs_err"] > 0
        assert rows(html, "diff-goldens") == 1
        assert f'<td class="n">{_number(golden["max_abs_err"])}</td>' in html
        assert "added" in statuses(html)


def test_a_moved_command_is_shown_moved(tmp_path):
    """A buffer created and written at another place: its rows say moved, as the diff does."""
    paths = {}
    for order in ("abc", "cab"):
        paths[order] = tmp_path / f"{order}.mnlb"
        three_buffers(order).save(paths[order])
    html = client(paths["abc"], paths["cab"]).get("/binary").text
    moved = diff(*(mnrt.LightBinary.load(p) for p in paths.values()))["commands"]
    assert moved and all(c.get("moved") for c in moved)
    assert statuses(html).count("moved") == len(moved) and "changed" not in statuses(html)


def test_two_binaries_of_other_programs_side_by_side(pipeline):
    two = ROOT / "samples" / "two_devices.mnlb"
    html = client(two, pipeline).get("/binary").text
    expected = diff(mnrt.LightBinary.load(two), mnrt.LightBinary.load(pipeline))
    assert "Side by side" in html and 'class="bad">different: ' in html
    assert rows(html, "diff") == expected["commands_equal"] + len(expected["commands"])


def test_layout_files_are_shown(tmp_path, cnn_dir):
    folder = tmp_path / "cg"
    shutil.copytree(cnn_dir, folder)
    html = client(folder).get("/layouts").text
    plan = json.loads((folder / "layout_plan.json").read_text())  # the compile's own plan
    assert "Final layouts" in html and "layout_plan.json" in html and plan["planner"] in html
    assert "switch_count" in html and "decisions" in html
    # every value's layout in full, though the notation has spaces in it
    shown = [v.layout for v in mnrt.Context().load_codegen_dir(folder).graph.values.values()]
    assert any(lay and lay.count(" ") and f"<td>{lay}</td>" in html for lay in shown)
    assert 'id="time-slices"' in html and "max_time_slice" in html  # the compile's count
    (folder / "layout_plan.json").unlink()
    assert "No layout plan history" in client(folder).get("/layouts").text
    plan = [{"step": 0, "value": "relu_1", "layout": "((8_L2B:1), (4_PE:1))"}]
    (folder / "layout_plan.json").write_text(json.dumps(plan))
    (folder / "time_slices.txt").write_text("slice 0: conv2d0\n")
    html = client(folder).get("/layouts").text
    assert "layout_plan.json" in html and "((8_L2B:1), (4_PE:1))" in html
    assert "slice 0: conv2d0" in html


def test_export_writes_every_page_offline(tmp_path, cnn_dir):
    statuses = export(Artifacts(cnn_dir), tmp_path / "out")
    assert statuses == {slug: 200 for slug in PAGES}
    for slug in PAGES:
        html = (tmp_path / "out" / f"{slug}.html").read_text()
        assert 'src="http' not in html and 'href="http' not in html  # no CDN
    assert (tmp_path / "out" / "static" / "plotly.min.js").stat().st_size > 1 << 20
    assert (tmp_path / "out" / "files" / "report.json").exists()
    assert json.loads((tmp_path / "out" / "trace.json").read_text())["traceEvents"]


def test_export_of_a_report_that_is_not_a_run_report_writes_pages_that_say_so(tmp_path):
    """A JSON file without a verdict: every page is written, the ones that need the report
    show why they cannot (the export went on to fail after writing them, exit 2)."""
    (tmp_path / "r.json").write_text('{"phases": []}')
    statuses = export(Artifacts(tmp_path / "r.json"), tmp_path / "out")
    assert set(statuses) == set(PAGES) and statuses["summary"] == 422
    assert "not a run report" in (tmp_path / "out" / "summary.html").read_text()
    assert not (tmp_path / "out" / "trace.json").exists()


def test_a_folder_that_is_not_a_codegen_dir_is_refused_not_walked(tmp_path):
    """`mnrt dashboard /` walked the whole file system (2.5 minutes), then failed with a
    PermissionError traceback; a folder holding none of a compile's files is refused."""
    (tmp_path / "notes.txt").write_text("hello")
    for folder in (tmp_path, Path("/")):
        code, out = invoke_cli("dashboard", folder, "--export", tmp_path / "pages")
        assert code == 2 and "a folder that is not a codegen_dir" in out, out
        assert "Traceback" not in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "pages").exists()


def test_a_codegen_dir_s_files_are_listed_without_following_links(tmp_path):
    """A link to / inside a codegen_dir is not followed (a walk of the whole file system
    would never end); other files are listed by folder, then name."""
    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.txt").write_text("b")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "root").symlink_to("/")
    files = Artifacts(tmp_path).files()
    assert [f["name"] for f in files] == ["a/b.txt", "a.json", "report.json"]
    assert files[0]["bytes"] == 1


def test_cli(tmp_path, cnn_dir):
    def mnrt(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mnrt", *args], capture_output=True, text=True, timeout=120
        )

    r = mnrt("dashboard", str(tmp_path / "missing"))
    assert r.returncode == 2 and "no such file or directory" in r.stderr
    assert "Traceback" not in r.stderr
    (tmp_path / "x.txt").write_text("hello")
    r = mnrt("dashboard", str(tmp_path / "x.txt"))
    assert r.returncode == 2 and "not a codegen_dir" in r.stderr
    r = mnrt("dashboard", str(cnn_dir), "--export", str(tmp_path / "pages"))
    assert r.returncode == 0 and "wrote 9 pages" in r.stdout
    r = mnrt("dashboard", "--help")
    assert "127.0.0.1" in r.stdout and "8327" in r.stdout


def test_port_in_use_is_a_clear_error():
    sock = bind("127.0.0.1", 0)
    try:
        with pytest.raises(InvalidArgumentError, match="choose another --port"):
            bind("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()


_BLOCK = (
    "import sys\n"
    "for m in ('starlette', 'jinja2', 'uvicorn', 'plotly', 'netron'):\n"
    "    sys.modules[m] = None\n"
    "from mnrt.runner.cli import main\n"
    "sys.argv = ['mnrt', *sys.argv[1:]]\n"
    "main()\n"
)


def test_without_the_extra_run_works_and_dashboard_says_what_to_install(tmp_path, pipeline):
    run = subprocess.run(
        [sys.executable, "-c", _BLOCK, "run", str(pipeline)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    board = subprocess.run(
        [sys.executable, "-c", _BLOCK, "dashboard", str(pipeline)], capture_output=True, text=True
    )
    assert board.returncode == 2
    assert "pip install mnrt[dashboard]" in board.stderr and "Traceback" not in board.stderr


def test_netron_is_served_offline(cnn_dir):
    r = client(cnn_dir).get("/netron/index.html")
    assert r.status_code == 200
    # marked unpackaged and dated today: no telemetry, no update nag; consent already given
    assert '<meta name="version" content="0.0.0">' in r.text
    assert "consent=" in r.headers["set-cookie"]
    assert client(cnn_dir).get("/netron/browser.js").status_code == 200


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["..", ".", "", "a", "option.json", "/", "\\\\", "%2e", "x:"])))
def test_resolve_never_leaves_path(tmp_path_factory, parts):
    folder = tmp_path_factory.mktemp("cg")
    (folder / "a").mkdir()
    (folder / "option.json").write_text("{}")
    (folder / "a" / "option.json").write_text("{}")
    art = Artifacts.__new__(Artifacts)  # only resolve() is exercised: no report needed
    art.path, art.kind, art.root = folder, "codegen_dir", folder.resolve()
    name = "/".join(parts)
    try:
        got = art.resolve(name)
    except (PathRefusedError, ArtifactMissingError):
        return
    assert got.is_relative_to(folder.resolve()) and got.is_file()


def test_cli_serves_on_localhost(cnn_dir):
    proc = subprocess.Popen(
        [sys.executable, "-m", "mnrt", "dashboard", str(cnn_dir), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        assert line.startswith("mnrt dashboard: http://127.0.0.1:"), line
        url = line.split(": ", 1)[1].strip()
        with urllib.request.urlopen(url + "compile.html", timeout=60) as r:
            assert r.status == 200 and b'<table id="phases">' in r.read()
    finally:
        proc.terminate()
        proc.wait(30)
