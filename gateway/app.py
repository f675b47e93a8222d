"""The aiohttp application: API, channel endpoints, web chat, health; auth, errors and
request metrics at its edge."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web
from aiohttp.typedefs import Middleware

from agent_core.errors import StoreUnavailableError
from agent_core.ids import new_id
from agent_core.models import ModelAdapter

from . import api
from .api import GATEWAY, GUARD
from .auth import LOCAL, LOCAL_ROLE, Credentials
from .fetching import FileLimits
from .guard import Guard
from .metrics import Metrics
from .service import Gateway
from .settings import GatewaySettings

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY = 1024 * 1024


def create_app(settings: GatewaySettings, *, model: ModelAdapter | None = None) -> web.Application:
    """The whole service as one aiohttp application (the gateway starts with it)."""
    gateway = Gateway(settings, model=model)
    guard = Guard(settings, Credentials.from_settings(settings))
    app = web.Application(middlewares=[edge(guard, gateway.metrics)],
                          client_max_size=MAX_BODY)
    app[GATEWAY] = gateway
    app[GUARD] = guard

    async def start(_: web.Application) -> None:
        await gateway.start()

    async def begin_stop(_: web.Application) -> None:
        await gateway.begin_stop()

    async def stop(_: web.Application) -> None:
        await gateway.stop()

    app.on_startup.append(start)
    app.on_shutdown.append(begin_stop)
    app.on_cleanup.append(stop)
    api.setup(app)
    app.router.add_post("/slack/events", _channel_route("slack"))
    app.router.add_post("/telegram/webhook", _channel_route("telegram"))
    app.router.add_post("/webhook/{source}", _channel_route("webhook"))
    app.router.add_get("/", webchat_page)
    app.router.add_get("/webchat/session", webchat_session)
    app.router.add_get("/static/{name}", static_file)
    app.router.add_get("/favicon.ico", favicon)
    return app


def _channel_route(name: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        channel = request.app[GATEWAY].parts.channels.endpoint(name)
        if channel is None:
            return web.json_response({"error": f"the {name} channel is not configured"},
                                     status=404)
        response: web.StreamResponse = await channel.handle(request)
        return response

    return handler


#: The web chat's files: its script, the Markdown renderer and sanitiser it uses (vendored,
#: gateway/static/vendor/README.md), its icon. Nothing is fetched from elsewhere.
_STATIC = {"chat.js": ("chat.js", "text/javascript"),
           "attach.js": ("attach.js", "text/javascript"),
           "marked.umd.js": ("vendor/marked.umd.js", "text/javascript"),
           "purify.min.js": ("vendor/purify.min.js", "text/javascript"),
           "favicon.svg": ("favicon.svg", "image/svg+xml")}
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' blob:; media-src 'self' blob:; object-src 'none'; "
        "base-uri 'none'; frame-ancestors 'none'")


async def webchat_page(request: web.Request) -> web.Response:
    """The web chat: a small page that streams the agent's steps."""
    page = resources.files("gateway.static").joinpath("index.html").read_text("utf-8")
    return web.Response(text=page, content_type="text/html",
                        headers={"Cache-Control": "no-store", "Content-Security-Policy": _CSP,
                                 "X-Content-Type-Options": "nosniff"})


async def webchat_session(request: web.Request) -> web.Response:
    """The web chat page's credential: on a gateway without HERMES_API_KEYS, the local
    token, handed only to the page itself (a same-origin fetch from this machine); with
    keys, nothing (the page asks its person for one). Either way, the limits of a
    message's files, for the page to check before it sends them."""
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
        raise web.HTTPForbidden(reason="the local token is handed only to the web chat page")
    return web.json_response({"token": token, "user": LOCAL, "role": LOCAL_ROLE,
                              "needs_key": False, "files": files},
                             headers={"Cache-Control": "no-store"})


async def static_file(request: web.Request) -> web.Response:
    """One of the web chat's own files, or 404."""
    found = _STATIC.get(request.match_info["name"])
    if found is None:
        return web.json_response({"error": "no such file"}, status=404)
    path, kind = found
    body = resources.files("gateway.static").joinpath(path).read_bytes()
    return web.Response(body=body, content_type=kind,
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


async def favicon(request: web.Request) -> web.Response:
    """Browsers ask for /favicon.ico whatever the page says: the SVG icon."""
    raise web.HTTPFound("/static/favicon.svg")


def edge(guard: Guard, metrics: Metrics) -> Middleware:
    """The one middleware every request passes: counted and timed, refused by the
    ``guard`` (a host not ours, a cross-site change, no credential where one is needed),
    and answered with a JSON reason whatever goes wrong, never a traceback. One layer
    rather than one per concern: each layer is a coroutine per request, and aiohttp adds
    one of its own to any."""
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            try:
                refused = guard.refuse(request)
                response = await handler(request) if refused is None else refused.response()
            except Exception as exc:
                answer = error_response(request, exc)
                if answer is None:
                    status = exc.status if isinstance(exc, web.HTTPException) else 500
                    raise
                response = answer
            status = response.status
            return response
        finally:
            metrics.request_done(request, status, started)

    return middleware


def error_response(request: web.Request, exc: Exception) -> web.Response | None:
    """The JSON answer to an error a handler raised, with a reason and never a traceback
    (None: one that goes out as it is, a JSON error of the API or a redirect)."""
    if isinstance(exc, web.HTTPException):
        if exc.content_type == "application/json" or exc.status < 400:
            return None
        return web.json_response({"error": exc.reason}, status=exc.status,
                                 headers={k: v for k, v in exc.headers.items()
                                          if k.lower() in ("allow", "www-authenticate")})
    if isinstance(exc, StoreUnavailableError):
        return web.json_response({"error": "the store is unreachable; retry shortly"},
                                 status=503, headers={"Retry-After": "5"})
    # A client error is raised as one (an HTTPException with its reason); anything else is
    # a bug: logged with its traceback, answered with only an id to find it by.
    trace = new_id(16)
    log.error("unhandled error on %s %s (trace %s)", request.method, request.path, trace,
              exc_info=exc)
    return web.json_response({"error": "internal error", "trace_id": trace}, status=500)
