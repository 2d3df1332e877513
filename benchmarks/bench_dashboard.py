"""Time to the dashboard's first page, and each page's weight (issue 16, Must show).

Time to first page: from starting `mnrt dashboard CODEGEN_DIR` (a new process) until its
summary page has arrived, polling every 5 ms; the baseline is Python's own static file
server (`python -m http.server`) started the same way on the same folder, until its
directory listing arrives. Fastest of --runs alternating runs each. Goal: under 1 s.

Page weight: the bytes a browser transfers for each page (HTML, script, style, chart data,
Netron's viewer and the model for the graph page; gzip where the browser asks for it), with
a cold cache, measured by headless Chromium through Playwright (needs the OS `chromium`).

    python benchmarks/bench_dashboard.py CODEGEN_DIR [--runs 5]

A VGG-19 codegen_dir (the `onnx` wheel's light model) is made by:

    python -c "import sys; sys.path.insert(0, 'benchmarks'); import mnrt; \
        from bench_compile_time import light_model; m, x = light_model('vgg19'); \
        mnrt.Context().compile(m, x, codegen_dir='out/vgg19_cg')"
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from _common import verdict


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_page(command: list[str], url: str) -> float:
    """Seconds from starting `command` until GET `url` answers 200."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    r.read()
                    if r.status == 200:
                        return time.perf_counter() - start
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"{command[:4]} exited with {proc.returncode}") from None
                time.sleep(0.005)
    finally:
        proc.terminate()
        proc.wait(10)


def page_weights(folder: Path) -> dict[str, tuple[int, int]]:
    """Per page: (bytes transferred, requests), cold cache, in headless Chromium."""
    from playwright.sync_api import sync_playwright

    from mnrt.dashboard import PAGES, open_dashboard
    from mnrt.dashboard.serve import running

    chromium = os.environ.get("MNRT_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        return {}
    out = {}
    with running(open_dashboard(folder)) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium)
        for slug in PAGES:
            context = browser.new_context()  # a cold cache for every page
            page = context.new_page()
            # Bytes on the wire per request, as Chromium's network layer counts them.
            received: dict[str, float] = {}
            cdp = context.new_cdp_session(page)
            cdp.send("Network.enable")
            cdp.on(
                "Network.loadingFinished",
                lambda e, sink=received: sink.__setitem__(e["requestId"], e["encodedDataLength"]),
            )
            page.goto(f"{url}{slug}.html", wait_until="networkidle")
            out[slug] = (int(sum(received.values())), len(received))
            context.close()
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("codegen_dir", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    folder = args.codegen_dir
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    board, base = [], []
    for _ in range(args.runs):
        port = _free_port()
        board.append(
            first_page(
                [sys.executable, "-m", "mnrt", "dashboard", str(folder), "--port", str(port)],
                f"http://127.0.0.1:{port}/",
            )
        )
        port = _free_port()
        base.append(
            first_page(
                [
                    sys.executable,
                    "-m",
                    "http.server",
                    str(port),
                    "-b",
                    "127.0.0.1",
                    "-d",
                    str(folder),
                ],
                f"http://127.0.0.1:{port}/",
            )
        )
        time.sleep(0.1)
    best, baseline = min(board), min(base)
    print(f"{folder} ({size / 1e6:.0f} MB): time to first page, fastest of {args.runs} runs")
    print(f"  python -m http.server (baseline)   {baseline * 1e3:8.0f} ms")
    print(
        f"  mnrt dashboard                     {best * 1e3:8.0f} ms  {best / baseline:5.2f}x "
        f"the baseline; goal < 1 s {verdict(best, 1.0, higher_is_better=False)}"
    )
    weights = page_weights(folder)
    if not weights:
        print("page weight: no Chromium installed (apt-get install chromium)")
        return
    print("page weight (cold cache, bytes transferred as the browser asked: gzip)")
    for slug, (total, count) in weights.items():
        print(f"  {slug:<10} {total / 1024:9.1f} KiB in {count:3d} requests")


if __name__ == "__main__":
    main()
