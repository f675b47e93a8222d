"""The HTTP API: run tasks, read them, follow their events, cancel them, forget
conversations. Every route answers JSON; bad input gets a 4xx with a reason."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import time
import uuid
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.base import InboundMessage, Routed
from adapters.errors import GatewayStopping
from agent_core import TaskState
from agent_core.store.keys import CONVERSATION_ID
from agent_core.task import PAUSED, TERMINAL

from .approvals import Decision, approval_signature
from .metrics import CONTENT_TYPE
from .openapi import spec
from .scheduler import Job, Scheduler
from .service import Gateway

log = logging.getLogger(__name__)

GATEWAY = web.AppKey("gateway", Gateway)
_LOCAL_ID = r"^[A-Za-z0-9][A-Za-z0-9._@+=/-]{0,150}$"


class RunRequest(BaseModel):
    """Body of POST /agent/run and /agent/run-async."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=20_000)
    conversation_id: str | None = Field(None, pattern=_LOCAL_ID)
    user_id: str | None = Field(None, min_length=1, max_length=200)


class ApprovalRequest(BaseModel):
    """Body of POST /agent/approvals/{id}."""

    model_config = ConfigDict(extra="forbid")

    approved: bool
    note: str = Field("", max_length=500)
    #: Edit-before-approve: replaces the tool call's arguments.
    arguments: dict[str, Any] | None = None
    user_id: str | None = Field(None, min_length=1, max_length=200)


def setup(app: web.Application) -> None:
    """Register the API routes."""
    app.router.add_post("/agent/run", run_sync)
    app.router.add_post("/agent/run-async", run_async)
    app.router.add_get("/agent/tasks/{task_id}", get_task)
    app.router.add_get("/agent/tasks/{task_id}/events", task_events)
    app.router.add_post("/agent/tasks/{task_id}/cancel", cancel_task)
    app.router.add_delete("/agent/conversations/{conversation_id}", forget_conversation)
    app.router.add_post("/agent/conversations/{conversation_id}/reset", reset_conversation)
    app.router.add_post("/agent/approvals/{approval_id}", decide_approval)
    app.router.add_get("/agent/approvals/{approval_id}", get_approval)
    app.router.add_get("/agent/audit", audit_log)
    app.router.add_route("*", "/webhook/{source}/approvals/{approval_id}/{decision}",
                         webhook_approval)
    app.router.add_get("/agent/schedules", list_schedules)
    app.router.add_post("/agent/schedules", create_schedule)
    app.router.add_get("/agent/schedules/{job_id}", get_schedule)
    app.router.add_put("/agent/schedules/{job_id}", replace_schedule)
    app.router.add_delete("/agent/schedules/{job_id}", delete_schedule)
    app.router.add_post("/agent/schedules/{job_id}/{action}", schedule_action)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)


async def _json_body(request: web.Request) -> bytes:
    """The raw body, or 415 unless it is sent as JSON."""
    if request.content_type != "application/json":
        raise _bad(415, "send the body as application/json")
    return await request.read()


def _invalid(exc: ValidationError) -> str:
    """The first few validation errors, as "field: message; ..."."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
                     for err in exc.errors()[:5])


async def parse(request: web.Request, model: type[BaseModel]) -> Any:
    """The request body as ``model``, or 400 naming what is wrong."""
    raw = await _json_body(request)
    try:
        return model.model_validate_json(raw or b"")
    except ValidationError as exc:
        raise _bad(400, f"invalid body: {_invalid(exc)}") from None


def _bad(status: int, reason: str) -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 403: web.HTTPForbidden,
           404: web.HTTPNotFound, 409: web.HTTPConflict, 410: web.HTTPGone,
           415: web.HTTPUnsupportedMediaType}[status]
    return cls(text=json.dumps({"error": reason}), content_type="application/json")


def _channel(request: web.Request) -> Any:
    """"webchat" for the web chat page, "api" for everyone else."""
    return "webchat" if request.headers.get("X-Hermes-Client") == "webchat" else "api"


def _inbound(body: RunRequest, request: web.Request) -> InboundMessage:
    channel = _channel(request)
    cid = body.conversation_id or uuid.uuid4().hex
    return InboundMessage(
        channel=channel, conversation_id=f"{channel}:{cid}",
        user_id=body.user_id or f"{channel}-user", text=body.text, is_direct=True,
        mentions_bot=True, platform_message_id=request.headers.get("Idempotency-Key"))


async def _submit(request: web.Request) -> tuple[InboundMessage, Routed]:
    """Route the request's message: a task, or a command answered at once."""
    gateway = request.app[GATEWAY]
    body = await parse(request, RunRequest)
    msg = _inbound(body, request)
    routed = await gateway.parts.router.ingest(msg)
    if routed.status == "duplicate":
        raise _bad(409, "a request with this Idempotency-Key was already accepted")
    if routed.status != "command" and routed.task_id is None:
        raise _bad(400, f"not accepted: {routed.status} ({routed.reason})")
    return msg, routed


def _command_answer(msg: InboundMessage, routed: Routed) -> web.Response:
    return web.json_response({"status": "command", "command": routed.reason,
                              "text": routed.reply, "conversation_id": msg.conversation_id})


async def run_async(request: web.Request) -> web.Response:
    """Queue a task; answer at once with its id."""
    msg, routed = await _submit(request)
    if routed.task_id is None:
        return _command_answer(msg, routed)
    task_id = routed.task_id
    return web.json_response({"task_id": task_id, "status": "queued",
                              "status_url": f"/agent/tasks/{task_id}",
                              "events_url": f"/agent/tasks/{task_id}/events"}, status=202)


async def run_sync(request: web.Request) -> web.Response:
    """Run a task and wait for its answer (or until HERMES_RUN_TIMEOUT: then 202)."""
    msg, routed = await _submit(request)
    if routed.task_id is None:
        return _command_answer(msg, routed)
    gateway, task_id = request.app[GATEWAY], routed.task_id
    deadline = time.monotonic() + gateway.settings.hermes_run_timeout
    try:
        async with asyncio.timeout(gateway.settings.hermes_run_timeout):
            async for event in gateway.parts.eventlog.follow(task_id):
                if event.get("type") == "AGENT_FINISHED":
                    outcome = (event.get("payload") or {}).get("outcome")
                    if outcome in TERMINAL or outcome in PAUSED:
                        break
                if time.monotonic() > deadline:
                    break
    except TimeoutError:
        pass
    view = await _task_view(gateway, task_id)
    status = 200 if view["status"] in TERMINAL | PAUSED else 202
    return web.json_response(view, status=status)


async def get_task(request: web.Request) -> web.Response:
    """A task's status, result and TaskReport."""
    gateway = request.app[GATEWAY]
    return web.json_response(await _task_view(gateway, request.match_info["task_id"]))


async def _task_view(gateway: Gateway, task_id: str) -> dict[str, Any]:
    return view_of(await _load_task(gateway, task_id))


async def _load_task(gateway: Gateway, task_id: str) -> TaskState:
    """The task's state, or 404."""
    state = await gateway.parts.opened.store.load_task(task_id)
    if state is None:
        raise _bad(404, f"no task {task_id!r}")
    return state


def view_of(state: TaskState) -> dict[str, Any]:
    """The public view of a task."""
    return {
        "task_id": state.task_id, "conversation_id": state.conversation_id,
        "status": state.status, "text": state.result_text, "answer": state.answer,
        "question": state.question.model_dump() if state.question else None,
        "approval": state.approval.model_dump() if state.approval else None,
        "error": state.error, "report": state.report or None, "rounds": state.round,
        "created_at": state.created_at, "updated_at": state.updated_at,
        "continued_in": state.extra.get("continued"),
        "events_url": f"/agent/tasks/{state.task_id}/events",
    }


async def task_events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the task's past events, then live ones; resumes after
    Last-Event-ID; ends once the task has finished."""
    gateway = request.app[GATEWAY]
    task_id = request.match_info["task_id"]
    await _load_task(gateway, task_id)  # 404 for unknown tasks
    after = request.headers.get("Last-Event-ID") or request.query.get("after") or "0-0"
    if not _valid_stream_id(after):
        raise _bad(400, "Last-Event-ID must be a stream id like 1712345678901-0")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    try:
        async for event in gateway.parts.eventlog.follow(task_id, after):
            if event["type"] == "KEEPALIVE":
                await response.write(b": keepalive\n\n")
                continue
            data = json.dumps(event, ensure_ascii=False)
            await response.write(f"id: {event['id']}\nevent: {event['type']}\n"
                                 f"data: {data}\n\n".encode())
            if event["type"] == "AGENT_FINISHED" and \
                    (event.get("payload") or {}).get("outcome") in TERMINAL:
                break
    except (ConnectionResetError, asyncio.CancelledError):
        return response
    await response.write_eof()
    return response


def _valid_stream_id(value: str) -> bool:
    head, _, tail = value.partition("-")
    return head.isdigit() and (tail.isdigit() or tail == "")


async def cancel_task(request: web.Request) -> web.Response:
    """Stop a running task, or drop a queued one."""
    gateway = request.app[GATEWAY]
    state = await _load_task(gateway, request.match_info["task_id"])
    if state.status == "queued":
        state.status, state.result_text = "cancelled", "Cancelled before it started."
        await gateway.parts.opened.store.save_task(state)
        return web.json_response({"task_id": state.task_id, "status": "cancelled"})
    if state.status != "running":
        raise _bad(409, f"task is {state.status}, not running")
    await gateway.parts.queue.signal(state.conversation_id, "stop", state.task_id)
    return web.json_response({"task_id": state.task_id, "status": "stopping"}, status=202)


def _conversation(request: web.Request) -> str:
    cid = request.match_info["conversation_id"]
    if not CONVERSATION_ID.match(cid):
        raise _bad(400, "invalid conversation id")
    return cid


async def forget_conversation(request: web.Request) -> web.Response:
    """Delete everything a conversation stored (a user's "forget me")."""
    gateway = request.app[GATEWAY]
    cid = _conversation(request)
    deleted = await gateway.parts.opened.store.forget(cid)
    return web.json_response({"conversation_id": cid, "deleted_keys": deleted})


async def reset_conversation(request: web.Request) -> web.Response:
    """Start a fresh session; the archive stays searchable."""
    gateway = request.app[GATEWAY]
    cid = _conversation(request)
    await gateway.parts.opened.store.reset(cid)
    return web.json_response({"conversation_id": cid, "reset": True})


def _caller(request: web.Request, user_id: str | None = None) -> str:
    """The identity of an API or web chat caller (channel:user)."""
    channel = _channel(request)
    user = user_id or request.headers.get("X-Hermes-User") or f"{channel}-user"
    return f"{channel}:{user}"


_DECISION_STATUS = {"decided": 200, "forbidden": 403, "unknown": 404, "already": 409,
                    "expired": 409}


async def decide_approval(request: web.Request) -> web.Response:
    """Approve or reject a paused tool call (optionally with edited arguments)."""
    gateway = request.app[GATEWAY]
    body = await parse(request, ApprovalRequest)
    actor = _caller(request, body.user_id)
    decision = await gateway.parts.approvals.decide(
        request.match_info["approval_id"], approved=body.approved, actor=actor,
        actor_name=actor, note=body.note, arguments=body.arguments)
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
    record = await gateway.parts.approvals.get(request.match_info["approval_id"])
    if record is None:
        raise _bad(404, "no such approval")
    keep = ("id", "status", "task_id", "conversation_id", "tool", "reason", "requester",
            "created_at", "expires_at", "decided_by", "decided_at", "note")
    view: dict[str, Any] = {k: record.get(k) for k in keep}
    view["arguments"] = json.loads(record["arguments"])
    return web.json_response(view)


async def audit_log(request: web.Request) -> web.Response:
    """The audit log, newest first (admins only)."""
    gateway = request.app[GATEWAY]
    caller = _caller(request)
    if gateway.roles.role_of(caller) != "admin":
        raise _bad(403, f"{caller} is not an admin")
    q = request.query
    try:
        since = float(q["since"]) if "since" in q else None
        until = float(q["until"]) if "until" in q else None
        limit = min(1000, max(1, int(q.get("limit", "100"))))
    except ValueError:
        raise _bad(400, "since and until are unix seconds; limit is a number") from None
    entries = await gateway.parts.audit.query(
        conversation_id=q.get("conversation_id"), user=q.get("user"), tool=q.get("tool"),
        since=since, until=until, limit=limit)
    return web.json_response({"entries": entries, "count": len(entries)})


async def webhook_approval(request: web.Request) -> web.Response:
    """A signed approve/reject link sent with a webhook callback."""
    gateway = request.app[GATEWAY]
    source = request.match_info["source"]
    approval_id = request.match_info["approval_id"]
    decision = request.match_info["decision"]
    if request.method not in ("GET", "POST"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST"])
    if decision not in ("approve", "reject"):
        raise _bad(404, "the decision must be approve or reject")
    secret = gateway.settings.hermes_webhook_secrets.get(source)
    exp = request.query.get("exp", "")
    sig = request.query.get("sig", "")
    if secret is None:
        raise _bad(404, f"unknown webhook source {source!r}")
    expected = approval_signature(secret.get_secret_value(), approval_id, decision, exp)
    if not exp.isdigit() or not hmac.compare_digest(expected, sig):
        raise _bad(401, "bad or missing signature")
    if int(exp) < time.time():
        raise _bad(410, "this link has expired")
    record = await gateway.parts.approvals.get(approval_id)
    if record is None:
        raise _bad(404, "no such approval")
    # The source signed this link for its user: decide as the person who asked.
    return _decision_response(await gateway.parts.approvals.decide(
        approval_id, approved=decision == "approve", actor=record["requester"],
        actor_name=record["requester_name"]))


def _scheduler(request: web.Request) -> Scheduler:
    gateway = request.app[GATEWAY]
    caller = _caller(request)
    if not gateway.roles.allows(caller, "schedule"):
        raise _bad(403, f"{caller} lacks the 'schedule' permission")
    return gateway.parts.scheduler


async def _job_body(request: web.Request, job_id: str | None = None) -> Job:
    raw = await _json_body(request)
    try:
        data = json.loads(raw or b"null")
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        if job_id is not None:
            data["id"] = job_id
        data.setdefault("run_as", _caller(request))
        for computed in ("created_at", "next_run_at", "last_run"):
            data.pop(computed, None)
        return Job.model_validate(data)
    except ValidationError as exc:
        raise _bad(400, f"invalid schedule: {_invalid(exc)}") from None
    except ValueError as exc:
        raise _bad(400, f"invalid schedule: {exc}") from None


async def list_schedules(request: web.Request) -> web.Response:
    """Every scheduled job, by next run."""
    jobs = await _scheduler(request).jobs()
    return web.json_response({"jobs": [j.model_dump(mode="json") for j in jobs]})


async def create_schedule(request: web.Request) -> web.Response:
    """Create a job (409 if its id exists)."""
    scheduler = _scheduler(request)
    job = await _job_body(request)
    if await scheduler.get(job.id) is not None:
        raise _bad(409, f"a schedule {job.id!r} exists; PUT replaces it")
    job = await scheduler.save(job)
    return web.json_response(job.model_dump(mode="json"), status=201)


async def get_schedule(request: web.Request) -> web.Response:
    """One job."""
    job = await _scheduler(request).get(request.match_info["job_id"])
    if job is None:
        raise _bad(404, "no such schedule")
    return web.json_response(job.model_dump(mode="json"))


async def replace_schedule(request: web.Request) -> web.Response:
    """Create or replace a job under this id."""
    scheduler = _scheduler(request)
    job = await scheduler.save(await _job_body(request, request.match_info["job_id"]))
    return web.json_response(job.model_dump(mode="json"))


async def delete_schedule(request: web.Request) -> web.Response:
    """Remove a job."""
    if not await _scheduler(request).delete(request.match_info["job_id"]):
        raise _bad(404, "no such schedule")
    return web.json_response({"deleted": request.match_info["job_id"]})


async def schedule_action(request: web.Request) -> web.Response:
    """pause, resume, or run (now, outside the timetable)."""
    scheduler = _scheduler(request)
    job_id, action = request.match_info["job_id"], request.match_info["action"]
    if action in ("pause", "resume"):
        job = await scheduler.set_paused(job_id, action == "pause")
        if job is None:
            raise _bad(404, "no such schedule")
        return web.json_response(job.model_dump(mode="json"))
    if action == "run":
        task_id = await scheduler.run_now(job_id)
        if task_id is None:
            raise _bad(404, "no such schedule")
        return web.json_response({"task_id": task_id, "status_url":
                                  f"/agent/tasks/{task_id}"}, status=202)
    raise _bad(404, "the action must be pause, resume or run")


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
