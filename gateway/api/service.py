"""The service itself: liveness, readiness, Prometheus metrics, the OpenAPI description."""

from __future__ import annotations

import os

from aiohttp import web

from adapters.errors import GatewayStopping

from ..metrics import CONTENT_TYPE
from ..openapi import spec
from ._http import GATEWAY, caller_of


async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI description of this API."""
    return web.json_response(spec())


async def healthz(request: web.Request) -> web.Response:
    """The process is alive (and which one answered, when several share the port)."""
    return web.json_response({"status": "ok", "pid": os.getpid()})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics (text exposition format)."""
    body = await request.app[GATEWAY].scrape()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def readyz(request: web.Request) -> web.Response:
    """The store answers and the workers run."""
    gateway = request.app[GATEWAY]
    try:
        return web.json_response(await gateway.health())
    except GatewayStopping:
        return web.json_response({"status": "stopping"}, status=503)
    except Exception as exc:
        return web.json_response({"status": "unavailable", "reason": type(exc).__name__},
                                 status=503)


async def whoami(request: web.Request) -> web.Response:
    """The principal the caller's credential proves, its role, and the identity it has."""
    caller = caller_of(request)
    return web.json_response({"user": caller.principal.name, "role": caller.role,
                              "identity": caller.identity, "admin": caller.admin,
                              "act_as": list(caller.principal.act_as)})


def setup(app: web.Application) -> None:
    """Register the service routes."""
    app.router.add_get("/agent/whoami", whoami)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
