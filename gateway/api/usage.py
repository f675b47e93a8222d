"""Where the budgets stand (admins only): GET /agent/usage?scope=&id=."""

from __future__ import annotations

from aiohttp import web

from agent_core.budget import SCOPES

from ._http import GATEWAY, bad, caller_of


async def usage(request: web.Request) -> web.Response:
    """The budgets of one scope's subject in their current windows: used, reserved by calls
    under way, limits, when each resets (admins only)."""
    caller = caller_of(request)
    if not caller.admin:
        raise bad(403, f"{caller.principal.name!r} is not an admin (its key's role is "
                       f"{caller.role!r})")
    scope = request.query.get("scope", "")
    subject = request.query.get("id", "")
    if scope not in SCOPES:
        raise bad(400, f"scope must be one of {', '.join(SCOPES)}")
    if scope != "global" and not subject:
        raise bad(400, f"id is required: whose {scope} budgets (e.g. slack:U123 for a user)")
    if len(subject) > 400:
        raise bad(400, "id is too long")
    budget = request.app[GATEWAY].parts.budget
    if budget is None:
        return web.json_response({"scope": scope, "id": subject, "budgets": []})
    uses = await budget.uses(budget.of_subject(scope, subject))
    return web.json_response({"scope": scope, "id": "all" if scope == "global" else subject,
                              "timezone": budget.calendar.timezone,
                              "budgets": [u.model_dump() for u in uses]})


def setup(app: web.Application) -> None:
    """Register the usage route."""
    app.router.add_get("/agent/usage", usage)
