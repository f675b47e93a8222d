"""The browser pages: the web chat (``/``) and the operator's console (``/console``), their
files (``/static/{name}``: our own scripts and the vendored libraries listed with their
versions and hashes in gateway/static/vendor/README.md; nothing is fetched from elsewhere),
and the pages' credential (``/webchat/session``).

Both pages are served with one strict Content-Security-Policy: scripts only from this
gateway's own files (no inline script), nothing embedded elsewhere, no frames.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from .api import GATEWAY, GUARD
from .auth import LOCAL, LOCAL_ROLE
from .fetching import FileLimits

#: name -> (path in gateway.static, content type).
FILES = {
    # The web chat: its script, the Markdown renderer and sanitiser it uses, its icon.
    "chat.js": ("chat.js", "text/javascript"),
    "attach.js": ("attach.js", "text/javascript"),
    "marked.umd.js": ("vendor/marked.umd.js", "text/javascript"),
    "purify.min.js": ("vendor/purify.min.js", "text/javascript"),
    "favicon.svg": ("favicon.svg", "image/svg+xml"),
    # The console: its stylesheet and scripts, the charts (uPlot) and the graph layout
    # (dagre) it draws with.
    "console.css": ("console/console.css", "text/css"),
    "console.js": ("console/console.js", "text/javascript"),
    "console-draw.js": ("console/draw.js", "text/javascript"),
    "console-pages.js": ("console/pages.js", "text/javascript"),
    "console-steer.js": ("console/steer.js", "text/javascript"),
    "console-hub.js": ("console/hub.js", "text/javascript"),
    "uPlot.iife.min.js": ("vendor/uPlot.iife.min.js", "text/javascript"),
    "uPlot.min.css": ("vendor/uPlot.min.css", "text/css"),
    "dagre.min.js": ("vendor/dagre.min.js", "text/javascript"),
}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' blob:; media-src 'self' blob:; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
PAGE_HEADERS = {"Cache-Control": "no-store", "Content-Security-Policy": CSP,
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def _page(name: str) -> web.Response:
    page = resources.files("gateway.static").joinpath(name).read_text("utf-8")
    return web.Response(text=page, content_type="text/html", headers=PAGE_HEADERS)


async def webchat_page(request: web.Request) -> web.Response:
    """The web chat: a small page that streams the agent's steps."""
    return _page("index.html")


async def console_page(request: web.Request) -> web.Response:
    """The operator's console (docs/console.md): it reads the API as its admin does."""
    return _page("console/index.html")


async def webchat_session(request: web.Request) -> web.Response:
    """The pages' credential: on a gateway without HERMES_API_KEYS, the local token,
    handed only to a page of this gateway (a same-origin fetch from this machine); with
    keys, nothing (the page asks its person for one). Either way, the limits of a
    message's files, for the web chat to check before it sends them."""
    guard = request.app[GUARD]
    limits = FileLimits(request.app[GATEWAY].settings)
    files = {"max_file_bytes": limits.file, "max_files": limits.count}
    token = guard.credentials.local_token()
    if token is None:
        return web.json_response({"token": None, "needs_key": True, "files": files},
                                 headers={"Cache-Control": "no-store"})
    if not guard.is_local(request):
        raise web.HTTPForbidden(reason="the local token is handed only to this machine")
    if request.headers.get("Sec-Fetch-Site") != "same-origin":
        raise web.HTTPForbidden(reason="the local token is handed only to this gateway's "
                                       "own pages")
    return web.json_response({"token": token, "user": LOCAL, "role": LOCAL_ROLE,
                              "needs_key": False, "files": files},
                             headers={"Cache-Control": "no-store"})


async def static_file(request: web.Request) -> web.Response:
    """One of the pages' own files, or 404."""
    found = FILES.get(request.match_info["name"])
    if found is None:
        return web.json_response({"error": "no such file"}, status=404)
    path, kind = found
    body = resources.files("gateway.static").joinpath(path).read_bytes()
    return web.Response(body=body, content_type=kind,
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


async def favicon(request: web.Request) -> web.Response:
    """Browsers ask for /favicon.ico whatever the page says: the SVG icon."""
    raise web.HTTPFound("/static/favicon.svg")


def setup(app: web.Application) -> None:
    """Register the pages' routes."""
    app.router.add_get("/", webchat_page)
    app.router.add_get("/console", console_page)
    app.router.add_get("/webchat/session", webchat_session)
    app.router.add_get("/static/{name}", static_file)
    app.router.add_get("/favicon.ico", favicon)
