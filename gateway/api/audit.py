"""The audit log, newest first, filtered (admins only)."""

from __future__ import annotations

from aiohttp import web

from ..openapi import MAX_AUDIT_LIMIT, MAX_UNIX_SECONDS
from ._http import GATEWAY, bad, caller_of, number, only


async def audit_log(request: web.Request) -> web.Response:
    """The audit log, newest first (admins only)."""
    gateway = request.app[GATEWAY]
    caller = caller_of(request)
    if not caller.admin:
        raise bad(403, f"{caller.principal.name!r} is not an admin (its key's role is "
                       f"{caller.role!r})")
    q = request.query
    only(request, "conversation_id", "user", "tool", "actor", "outcome", "since", "until",
         "limit")
    since = number(request, "since", low=0, high=MAX_UNIX_SECONDS)
    until = number(request, "until", low=0, high=MAX_UNIX_SECONDS)
    limit = number(request, "limit", low=1, high=MAX_AUDIT_LIMIT, default=100, integer=True)
    assert limit is not None
    entries = await gateway.parts.audit.query(
        conversation_id=q.get("conversation_id"), user=q.get("user"), tool=q.get("tool"),
        since=since, until=until, limit=int(limit), actor=q.get("actor"),
        outcome=q.get("outcome"))
    return web.json_response({"entries": entries, "count": len(entries)})


def setup(app: web.Application) -> None:
    """Register the audit route."""
    app.router.add_get("/agent/audit", audit_log)
