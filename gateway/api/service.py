"""The service itself: liveness, readiness, its status for admins, Prometheus metrics, the
OpenAPI description."""

from __future__ import annotations

import logging
import os

from aiohttp import web

from adapters.errors import GatewayStopping

from ..metrics import CONTENT_TYPE
from ..openapi import spec
from ._http import GATEWAY, bad, caller_of

log = logging.getLogger(__name__)


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
    """Whether the gateway takes work (the store answers, it is not stopping), and nothing
    more: the probe is public, so where the store is, the model, the channels and the MCP
    servers are for admins only (GET /agent/status)."""
    try:
        await request.app[GATEWAY].ready()
    except GatewayStopping:
        return web.json_response({"status": "stopping"}, status=503)
    except Exception as exc:
        log.debug("not ready: %s", type(exc).__name__)
        return web.json_response({"status": "unavailable"}, status=503)
    return web.json_response({"status": "ready"})


async def status(request: web.Request) -> web.Response:
    """The gateway's parts for an admin: the store's location, the model, the channels,
    the hub, the MCP servers, the queue; 503 with the reason when it is not ready."""
    gateway = request.app[GATEWAY]
    caller = caller_of(request)
    if not caller.admin:
        raise bad(403, f"{caller.principal.name!r} is not an admin (its key's role is "
                       f"{caller.role!r})")
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
    app.router.add_get("/agent/status", status)
