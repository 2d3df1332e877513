"""The dashboard's web application (Starlette + Jinja2): one route per page, the files under
PATH, the Perfetto trace, the Netron viewer and the static assets (Plotly's JavaScript comes
from the plotly wheel: nothing is fetched from the internet)."""

from __future__ import annotations

import json
import logging
import math
import mimetypes
import re
import time
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from ..errors import InvalidBinaryError, MnrtError
from .artifacts import ArtifactMissingError, Artifacts, PathRefusedError
from .assets import asset_path, netron_dir
from .pages import PAGES

log = logging.getLogger("mnrt.dashboard")
_TEMPLATES = Path(__file__).parent / "templates"


def _number(value: Any, digits: int = 4) -> str:
    """A figure as people read it: 4 significant digits, thousands apart for integers."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.{digits}g}"
    return str(value)


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _compact_json(value: Any) -> str:
    """A value as one line of JSON; one nested too deeply for the encoder (a file edited by
    hand: JSON parses a little deeper than it encodes below a page's frames) is named."""
    try:
        return json.dumps(value, separators=(",", ":"), default=str)
    except RecursionError:
        return "(nested too deeply to show here: open the file)"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _number
    env.filters["bytes"] = _bytes
    env.filters["tojson_compact"] = _compact_json
    return env


def status_of(e: Exception) -> int:
    """The HTTP status for a failure: missing 404, refused 403, corrupt 422, else 500."""
    if isinstance(e, InvalidBinaryError):
        return 422
    return getattr(e, "status", 500 if not isinstance(e, MnrtError) else 422)


def render_page(
    env: jinja2.Environment, art: Artifacts, slug: str, static: bool
) -> tuple[str, int]:
    """One page's HTML and HTTP status: an error page (never a traceback) when its data
    cannot be read."""
    page = PAGES[slug]
    common = {
        "pages": [(s, m.TITLE) for s, m in PAGES.items()],
        "slug": slug,
        "title": page.TITLE,
        "art": art,
        "static": static,
    }
    try:
        context = page.build(art)
        return env.get_template(f"{slug}.html").render(**common, **context), 200
    except Exception as e:  # every failure becomes a page that says what was wrong
        if not isinstance(e, MnrtError):
            log.exception("dashboard page %s failed", slug)
        message = str(e) if isinstance(e, MnrtError) else f"{type(e).__name__}: {e}"
        html = env.get_template("error.html").render(**common, message=message)
        return html, status_of(e)


def _error(env: jinja2.Environment, art: Artifacts, e: Exception) -> HTMLResponse:
    common = {"pages": [(s, m.TITLE) for s, m in PAGES.items()], "slug": "", "art": art}
    html = env.get_template("error.html").render(
        **common, title="Not available", message=str(e), static=False
    )
    return HTMLResponse(html, status_code=status_of(e))


_NETRON_META = re.compile(r'<meta name="(version|date)" content="[^"]*">')


def _netron_index() -> str:
    """Netron's page as its own Python server serves it, but marked unpackaged and dated
    today, so the viewer asks no consent, sends no telemetry and never asks to update (all
    of which would reach for the internet)."""
    text = (netron_dir() / "index.html").read_text()
    today = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    values = {"version": "0.0.0", "date": today}
    return _NETRON_META.sub(lambda m: f'<meta name="{m[1]}" content="{values[m[1]]}">', text)


def create_app(art: Artifacts) -> Starlette:
    """The ASGI application serving `art`'s pages. Handlers are plain functions, which
    Starlette runs on its thread pool: a page that replays the binary does not hold up the
    others."""
    env = environment()

    def page(request: Request) -> Response:
        slug = request.path_params.get("slug", "summary").removesuffix(".html")
        if slug == "index":
            slug = "summary"
        if slug not in PAGES:
            return _error(env, art, ArtifactMissingError(f"no page {slug!r}"))
        html, status = render_page(env, art, slug, static=False)
        return HTMLResponse(html, status_code=status)

    def files(request: Request) -> Response:
        try:
            path = art.resolve(request.path_params["name"])
        except MnrtError as e:
            return _error(env, art, e)
        return FileResponse(path, media_type=mimetypes.guess_type(path.name)[0])

    def trace(request: Request) -> Response:
        try:
            body = json.dumps(art.trace, default=str)
        except Exception as e:
            return _error(env, art, e)
        headers = {"Content-Disposition": 'attachment; filename="trace.json"'}
        return Response(body, media_type="application/json", headers=headers)

    def static(request: Request) -> Response:
        try:
            path = asset_path(request.path_params["name"])
        except MnrtError as e:
            return _error(env, art, e)
        headers = {"Cache-Control": "max-age=3600"}
        return FileResponse(path, media_type=mimetypes.guess_type(path.name)[0], headers=headers)

    def netron(request: Request) -> Response:
        name = request.path_params["name"] or "index.html"
        if name == "index.html":
            response = HTMLResponse(_netron_index())
            # Netron's consent dialogue asks a web service where the user is; say it was given.
            response.set_cookie("consent", str(int(time.time() * 1000)), path="/")
            return response
        root = netron_dir().resolve()
        path = (root / name).resolve()
        if ".." in name.split("/") or not path.is_relative_to(root) or not path.is_file():
            return _error(env, art, PathRefusedError(f"{name!r}: not a file of the viewer"))
        return FileResponse(path, media_type=mimetypes.guess_type(path.name)[0])

    routes = [
        Route("/", page),
        Route("/files/{name:path}", files),
        Route("/trace.json", trace),
        Route("/static/{name:path}", static),
        Route("/netron/{name:path}", netron),
        Route("/{slug}", page),
    ]
    return Starlette(routes=routes, middleware=[Middleware(GZipMiddleware, minimum_size=1024)])
