"""The hub as the console shows it (admins only, with HERMES_HUB): the live agents (their
capabilities, load, copies and heartbeat age, as discovery says) and everything that
passed through the hub under one correlation id, in order (who sent what to whom, when)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ._http import GATEWAY, bad
from .console import admin

if TYPE_CHECKING:
    from hub import Bus

#: The longest message body a hop shows (a larger one is cut, and says so).
MAX_BODY = 20_000


def _bus(request: web.Request, *params: str) -> Bus:
    admin(request, *params)
    bus = request.app[GATEWAY].parts.bus
    if bus is None:
        raise bad(409, "the agent hub is not enabled here (HERMES_HUB=true)")
    return bus


def _unavailable(what: str) -> web.HTTPException:
    return web.HTTPServiceUnavailable(
        text=json.dumps({"error": f"{what} does not answer; retry shortly"}),
        content_type="application/json", headers={"Retry-After": "5"})


async def agents(request: web.Request) -> web.Response:
    """The live agents, least loaded first."""
    from hub.discovery import discover

    bus = _bus(request)
    try:
        live = await discover(bus, "*")
    except Exception:
        raise _unavailable("the hub's discovery") from None
    return web.json_response({"agents": [
        {"agent_id": c.agent_id, "capabilities": list(c.capabilities),
         "load_percent": c.load_percent, "copies": c.copies, "version": c.version,
         "heartbeat_age": c.heartbeat_age} for c in live]})


async def messages(request: web.Request) -> web.Response:
    """The messages that carried ``correlation_id``, oldest first."""
    from hub.replay import replay

    bus = _bus(request, "correlation_id")
    correlation_id = request.query.get("correlation_id", "")
    if not correlation_id or len(correlation_id) > 200:
        raise bad(400, "correlation_id is required (at most 200 characters)")
    try:
        hops = await replay(bus, correlation_id)
    except Exception:
        raise _unavailable("the hub's streams") from None
    return web.json_response({"correlation_id": correlation_id,
                              "messages": [_hop(h.stored_at.timestamp(), h.stream, h.subject,
                                                h.message) for h in hops]})


def _hop(at: float, stream: str, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    shown: Any = body
    if len(json.dumps(body, default=str)) > MAX_BODY:
        shown = {"cut": f"over {MAX_BODY} characters"}
    return {"at": at, "stream": stream, "subject": subject, "type": body.get("type"),
            "sender_id": body.get("sender_id"), "receiver_id": body.get("receiver_id"),
            "message_id": body.get("message_id"), "body": shown}


def setup(app: web.Application) -> None:
    """Register the hub's routes."""
    app.router.add_get("/agent/hub/agents", agents)
    app.router.add_get("/agent/hub/messages", messages)
