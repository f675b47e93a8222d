"""Approvals: decide a paused tool call (optionally with edited arguments), read one, and
the signed approve / reject links sent with webhook callbacks."""

from __future__ import annotations

import html
import json
import time
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from adapters.arguments import display_json

from ..approvals import Decision
from ._http import GATEWAY, bad, caller_of, parse


class ApprovalRequest(BaseModel):
    """Body of POST /agent/approvals/{id}."""

    model_config = ConfigDict(extra="forbid")

    approved: bool
    note: str = Field("", max_length=500)
    #: Edit-before-approve: replaces the tool call's arguments.
    arguments: dict[str, Any] | None = None
    user_id: str | None = Field(None, min_length=1, max_length=200)


_DECISION_STATUS = {"decided": 200, "forbidden": 403, "unknown": 404, "already": 409,
                    "expired": 409, "invalid": 400}


async def decide_approval(request: web.Request) -> web.Response:
    """Approve or reject a paused tool call (optionally with edited arguments)."""
    gateway = request.app[GATEWAY]
    body = await parse(request, ApprovalRequest)
    caller = caller_of(request, body.user_id)
    decision = await gateway.parts.approvals.decide(
        request.match_info["approval_id"], approved=body.approved, actor=caller.identity,
        actor_name=caller.identity, note=body.note, arguments=body.arguments,
        actor_role=caller.role, principal=caller.principal.name)
    return _decision_response(decision, decided_by=decision.by_name or decision.by)


def _decision_response(decision: Decision, **extra: Any) -> web.Response:
    payload = {"outcome": decision.outcome, "status": decision.status, **extra,
               "message": decision.message}
    if decision.outcome != "decided":
        payload["error"] = decision.message
    return web.json_response(payload, status=_DECISION_STATUS[decision.outcome])


async def get_approval(request: web.Request) -> web.Response:
    """A pending or decided approval."""
    gateway = request.app[GATEWAY]
    approvals = gateway.parts.approvals
    record = await approvals.get(request.match_info["approval_id"])
    caller = caller_of(request)
    # The asking conversation's own callers, an admin, or whoever may decide it.
    if record is None or not (caller.may_see(record["conversation_id"]) or approvals.may_decide(
            record, caller.identity, approved=True, role=caller.role)):
        raise bad(404, "no such approval")
    keep = ("id", "status", "task_id", "conversation_id", "tool", "reason", "requester",
            "created_at", "expires_at", "decided_by", "decided_at", "note")
    view: dict[str, Any] = {k: record.get(k) for k in keep}
    # What the tool runs (or ran) with; an approver's edit replaced the model's proposal.
    view["arguments"] = json.loads(record["arguments"])
    proposed = record.get("proposed_arguments")
    view["proposed_arguments"] = json.loads(proposed) if proposed else None
    return web.json_response(view)


async def webhook_approval(request: web.Request) -> web.Response:
    """A signed approve/reject link sent with a webhook callback. A GET (what link previews,
    mail scanners and chat unfurlers send) only shows what would be decided and a button;
    only a POST (the button) decides."""
    gateway = request.app[GATEWAY]
    source = request.match_info["source"]
    approval_id = request.match_info["approval_id"]
    decision = request.match_info["decision"]
    if request.method not in ("GET", "POST"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST"])
    if decision not in ("approve", "reject"):
        raise bad(404, "the decision must be approve or reject")
    exp = request.query.get("exp", "")
    sig = request.query.get("sig", "")
    if source not in gateway.settings.hermes_webhook_secrets:
        raise bad(404, f"unknown webhook source {source!r}")
    if not exp.isdigit():
        raise bad(401, "bad or missing signature")
    approvals = gateway.parts.approvals
    record = await approvals.get(approval_id)
    if record is None:
        raise bad(404, "no such approval")
    # Signed by this source, for this approval of this source and its requester: a link
    # signed with another source's secret decides nothing.
    if not approvals.link_matches(record, source=source, decision=decision, exp=exp, sig=sig):
        raise bad(401, "bad or missing signature")
    if int(exp) < time.time():
        raise bad(410, "this link has expired")
    if request.method == "GET":
        return _confirm_page(record, decision)
    # The source signed this link for its user: decide as the person who asked.
    return _decision_response(await approvals.decide(
        approval_id, approved=decision == "approve", actor=record["requester"],
        actor_name=record["requester_name"]))


def _confirm_page(record: dict[str, Any], decision: str) -> web.Response:
    """What the link would decide, and the button (a POST to the same signed URL)."""
    verb = "Approve" if decision == "approve" else "Reject"
    arguments = display_json(json.loads(record["arguments"]))
    done = record.get("status") != "pending"
    button = (f"<p>This request was already {html.escape(str(record.get('status')))}.</p>"
              if done else f'<form method="post"><button type="submit">{verb}</button></form>')
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{verb} "
            f"{html.escape(str(record['tool']))}?</title></head><body>"
            f"<h1>{verb} {html.escape(str(record['tool']))}?</h1>"
            f"<p>Asked by {html.escape(str(record.get('requester_name') or record['requester']))}"
            f": {html.escape(str(record.get('reason') or ''))}</p>"
            f"<pre>{html.escape(arguments)}</pre>{button}</body></html>")
    return web.Response(text=page, content_type="text/html", headers={
        "Cache-Control": "no-store", "X-Robots-Tag": "noindex",
        "Content-Security-Policy": "default-src 'none'; form-action 'self'"})


def setup(app: web.Application) -> None:
    """Register the approval routes."""
    app.router.add_post("/agent/approvals/{approval_id}", decide_approval)
    app.router.add_get("/agent/approvals/{approval_id}", get_approval)
    app.router.add_route("*", "/webhook/{source}/approvals/{approval_id}/{decision}",
                         webhook_approval)
