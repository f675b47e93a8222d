"""The aiohttp application: API, channel endpoints, the browser pages (web chat, console),
health; auth, errors and request metrics at its edge."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from agent_core.errors import StoreUnavailableError
from agent_core.ids import new_id
from agent_core.models import ModelAdapter

from . import api, pages
from .api import GATEWAY, GUARD
from .auth import Credentials
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
    pages.setup(app)
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
