"""`mnrt dashboard PATH --export DIR`: the same pages as static files (for CI artefacts),
with the assets they load, the Perfetto trace and the small files they link to."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ..errors import InvalidArgumentError, MnrtError
from ..format.files import write_atomically
from .app import environment, render_page
from .artifacts import Artifacts
from .assets import own_assets, plotly_js
from .pages import PAGES

# Files of PATH that exported pages link to are copied up to this size (weights and
# binaries are not: the pages describe them).
COPY_LIMIT = 16 << 20


def export(art: Artifacts, folder: str | os.PathLike) -> dict[str, int]:
    """Write every page as DIR/<page>.html (the summary also as index.html); returns each
    page's HTTP-like status (200, or the error page's)."""
    out = Path(folder)
    try:
        (out / "static").mkdir(parents=True, exist_ok=True)
        (out / "files").mkdir(exist_ok=True)
    except OSError as e:
        raise InvalidArgumentError(
            f"--export {out}: cannot create it ({e.strerror or e}); give a writable folder"
        ) from None
    env = environment()
    statuses = {}
    for slug in PAGES:
        html, status = render_page(env, art, slug, static=True)
        statuses[slug] = status
        write_atomically(out / f"{slug}.html", html.encode())
        if slug == "summary":
            write_atomically(out / "index.html", html.encode())
    for asset in [*own_assets(), plotly_js()]:
        write_atomically(out / "static" / asset.name, asset.read_bytes())
    # A binary that cannot be replayed, or a report that cannot be read to find it, has no
    # trace: the pages say why (the export went on to fail here after writing them).
    with contextlib.suppress(MnrtError):
        if art.binary_path is not None:
            write_atomically(out / "trace.json", json.dumps(art.trace, default=str).encode())
    for f in art.files():
        if f["bytes"] <= COPY_LIMIT and not f["name"].endswith((".npz", ".mnlb")):
            target = out / "files" / f["name"]
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(target, art.resolve(f["name"]).read_bytes())
    return statuses
