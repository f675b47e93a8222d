"""The audit log, newest first, filtered (admins only)."""

from __future__ import annotations

from aiohttp import web

from ._http import GATEWAY, bad, identity_of


async def audit_log(request: web.Request) -> web.Response:
    """The audit log, newest first (admins only)."""
    gateway = request.app[GATEWAY]
    caller = identity_of(request)
    if gateway.roles.role_of(caller) != "admin":
        raise bad(403, f"{caller} is not an admin")
    q = request.query
    try:
        since = float(q["since"]) if "since" in q else None
        until = float(q["until"]) if "until" in q else None
        limit = min(1000, max(1, int(q.get("limit", "100"))))
    except ValueError:
        raise bad(400, "since and until are unix seconds; limit is a number") from None
    entries = await gateway.parts.audit.query(
        conversation_id=q.get("conversation_id"), user=q.get("user"), tool=q.get("tool"),
        since=since, until=until, limit=limit)
    return web.json_response({"entries": entries, "count": len(entries)})


def setup(app: web.Application) -> None:
    """Register the audit route."""
    app.router.add_get("/agent/audit", audit_log)
