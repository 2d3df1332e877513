"""The dashboard in a real browser: headless Chromium (the OS package `chromium`) driven by
Playwright's Python API opens every page for the CNN's codegen_dir and for a four-device
pipeline binary, and checks there are no console errors, the tables hold the expected rows,
the charts rendered and Netron drew the graph. Screenshots are saved under
$MNRT_SCREENSHOT_DIR (or the test's tmp dir). Skipped, saying why, without a browser."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install mnrt[test])"
)

from mnrt.dashboard import PAGES, open_dashboard  # noqa: E402
from mnrt.dashboard.serve import running  # noqa: E402
from mnrt.format import LightBinary  # noqa: E402
from mnrt.replay.diff import diff, summary  # noqa: E402


def _chromium() -> str | None:
    """The browser: $MNRT_CHROMIUM, else Debian's `chromium` (or `chromium-browser`)."""
    given = os.environ.get("MNRT_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium browser installed: `apt-get install chromium` (see README, "
    "'Dashboard'), or set MNRT_CHROMIUM to a Chromium binary",
)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM)
        yield b
        b.close()


@pytest.fixture
def shots(tmp_path, request) -> Path:
    base = os.environ.get("MNRT_SCREENSHOT_DIR")
    folder = Path(base) / request.node.name if base else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Visit:
    """A browser tab that records console errors and uncaught exceptions."""

    def __init__(self, browser, url: str) -> None:
        self.url = url
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def open(self, slug: str):
        response = self.page.goto(f"{self.url}{slug}.html")
        assert response is not None and response.status == 200, slug
        charts = self.page.locator("script.chart-data").count()
        if charts:  # every chart drew its SVG
            self.page.wait_for_function(
                f"document.body.dataset.chartsRendered === '{charts}'", timeout=30_000
            )
            assert self.page.locator("div.chart .main-svg").count() >= charts
        return self.page

    def rows(self, table: str) -> int:
        return self.page.locator(f"table#{table} > tbody > tr").count()

    def visible_rows(self, table: str) -> int:
        return self.page.locator(f"table#{table} > tbody > tr:not([hidden])").count()


def _netron_drew(page, text: str) -> None:
    frame = page.frame_locator("#netron")
    frame.locator("g.node").first.wait_for(timeout=60_000)
    assert frame.locator("g.node").count() >= 5
    assert frame.get_by_text(text).count() >= 1


def test_every_page_of_the_cnn_codegen_dir(browser, cnn_dir, shots):
    report = json.loads((cnn_dir / "report.json").read_text())
    layers = len(report["layers"])
    ran = sum(not x.get("elided") for x in report["layers"])  # the kernels: one row each
    with running(open_dashboard(cnn_dir)) as url:
        visit = Visit(browser, url)
        for slug in PAGES:
            page = visit.open(slug)
            if slug == "graph":
                _netron_drew(page, "Conv")
            page.screenshot(path=str(shots / f"{slug}.png"), full_page=slug != "graph")
        assert visit.errors == []
        visit.open("compile")
        assert visit.rows("phases") == len(report["phases"])
        visit.open("layers")
        assert visit.rows("layers") == ran
        visit.open("nodes")
        assert visit.rows("nodes") == layers
        nodes = json.loads((cnn_dir / "graph.json").read_text())["nodes"]
        mention = sum("max_pool2d" in json.dumps(n) for n in nodes)  # the op or an operand
        visit.page.fill("#node-search", "max_pool2d")
        assert 0 < visit.visible_rows("nodes") == mention < layers
        page = visit.open("perf")  # by default: the total and each op's total
        ops = {layer["op"] for layer in report["layers"] if not layer.get("elided")}
        shown = page.locator("table#perf > tbody > tr:not([hidden])")
        assert shown.count() == len(ops) + 1
        assert shown.first.inner_text().startswith("ALL\tALL\tALL")
        page.select_option("select[data-column='op']", "conv2d")
        page.select_option("select[data-column='attribute']", "*")
        texts = shown.all_inner_texts()
        assert len(texts) > 2 and all(t.startswith("conv2d") for t in texts)
        assert any("\tstride\t" in t for t in texts)
        page = visit.open("summary")
        commands = open_dashboard(cnn_dir).dump["commands"]
        assert visit.rows("goldens") == sum(bool(c["cmd"].get("golden")) for c in commands) > 0
        assert page.get_by_text("passed").count() >= 1  # the compile's accuracy check
        assert visit.errors == []
    assert sorted(p.stem for p in shots.glob("*.png")) == sorted(PAGES)


def test_every_page_of_a_multi_device_binary(browser, pipeline, shots):
    with running(open_dashboard(pipeline)) as url:
        visit = Visit(browser, url)
        for slug in PAGES:
            page = visit.open(slug)
            page.screenshot(path=str(shots / f"{slug}.png"), full_page=True)
        assert visit.errors == []
        page = visit.open("timeline")
        assert visit.rows("devices") == 4
        # one bar trace per kind of command, and the copy and event arrows
        names = page.evaluate("Array.from(document.getElementById('timeline').data, t => t.name)")
        assert {"program", "copy", "copy arrows", "event arrows"} <= set(names)
        rows = page.evaluate("document.getElementById('timeline').layout.yaxis.categoryarray")
        assert "device 3 / queue 0" in rows and "device 1 / link in" in rows
        with page.expect_download() as download:
            page.click("#trace-link")
        trace = json.loads(Path(download.value.path()).read_text())
        assert any(e.get("cat") == "event" for e in trace["traceEvents"])
        page = visit.open("binary")
        assert visit.rows("commands") == len(open_dashboard(pipeline).dump["commands"])
        assert page.get_by_text("CopyBuffer").count() >= 1
        assert visit.errors == []


def test_two_binaries_on_the_binary_page(browser, chains, shots):
    """A chain of 20 kernels against one of 21: the rows `mnrt diff` gives, coloured by
    what happened to each command, and the golden's error by value."""
    expected = diff(LightBinary.load(chains["a"]), LightBinary.load(chains["longer"]))
    with running(open_dashboard(chains["a"], chains["longer"])) as url:
        visit = Visit(browser, url)
        page = visit.open("binary")
        page.screenshot(path=str(shots / "binary_two.png"), full_page=True)
        assert visit.errors == []
        assert visit.rows("diff") == expected["commands_equal"] + len(expected["commands"])
        assert page.locator("#diff-summary").inner_text() == summary(expected)
        colour = {
            status: page.locator(f"table#diff tr.{status} td").first.evaluate(
                "td => getComputedStyle(td).backgroundColor"
            )
            for status in ("equal", "changed", "added")
        }
        assert len(set(colour.values())) == 3
        assert visit.rows("diff-goldens") == 1
