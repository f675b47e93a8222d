"""Tasks: run one (waiting for its answer, or not), read it, follow its events as
server-sent events (resuming after Last-Event-ID), cancel it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import mimetypes
import re
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.base import InboundMessage, Routed
from agent_core import PAUSED, TERMINAL, Sandbox, TaskState, ToolError
from agent_core.ids import new_id
from agent_core.tools.sandbox import sandbox_dir

from ..openapi import ATTACHMENT_NAME, BASE64
from ..service import Gateway
from ._http import GATEWAY, LOCAL_ID, audited, bad, body_within, caller_of, invalid, visible
from .uploads import Limits, Upload, decoded, multipart, stashed


class FilePart(BaseModel):
    """A file sent in a JSON body, base64."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255)
    content_type: str | None = Field(None, max_length=200)
    data: str = Field(pattern=BASE64)


class RunRequest(BaseModel):
    """Body of POST /agent/run and /agent/run-async."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=20_000)
    conversation_id: str | None = Field(None, pattern=LOCAL_ID)
    user_id: str | None = Field(None, min_length=1, max_length=200)
    files: list[FilePart] = Field(default_factory=list, max_length=100)


class FormRequest(RunRequest):
    """The fields of a multipart body: the text may be empty when files come with it."""

    text: str = Field("", max_length=20_000)


def _inbound(body: RunRequest, request: web.Request) -> InboundMessage:
    caller = caller_of(request, body.user_id)
    return InboundMessage(
        channel=caller.channel, conversation_id=caller.conversation(
            body.conversation_id or new_id()),
        user_id=caller.user, text=body.text, is_direct=True, mentions_bot=True,
        platform_message_id=request.headers.get("Idempotency-Key"), role=caller.role,
        principal=caller.principal.name if caller.user != caller.principal.name else "")


async def _message(request: web.Request) -> InboundMessage:
    """The request's message, its files stashed for the worker."""
    gateway = request.app[GATEWAY]
    body, uploads = await _body(request, Limits(gateway.settings))
    msg = _inbound(body, request)
    if uploads:
        msg.attachments = await stashed(gateway.parts.inbox.stash, msg.conversation_id,
                                        uploads)
    return msg


async def _submit(request: web.Request, msg: InboundMessage, task_id: str | None = None
                  ) -> Routed:
    """Route the request's message: a task, or a command answered at once. Given the
    ``task_id`` (a synchronous run, which waits for it), the task starts here if it can."""
    gateway = request.app[GATEWAY]
    routed = await gateway.parts.router.ingest(msg, task_id=task_id,
                                               start_here=task_id is not None)
    if routed.status == "duplicate":
        raise bad(409, "a request with this Idempotency-Key was already accepted")
    if routed.status != "command" and routed.task_id is None:
        raise bad(400, f"not accepted: {routed.status} ({routed.reason})")
    return routed


async def _body(request: web.Request, limits: Limits) -> tuple[RunRequest, list[Upload]]:
    """The request's message and its files: a JSON body (files as base64 parts) or a
    multipart/form-data one (files as file fields)."""
    if request.content_type == "multipart/form-data":
        fields, uploads = await multipart(request, limits)
        try:
            body = FormRequest.model_validate(fields)
        except ValidationError as exc:
            raise bad(400, f"invalid body: {invalid(exc)}") from None
        if not body.text and not uploads:
            raise bad(400, "send a text, files, or both")
        return body, uploads
    if request.content_type != "application/json":
        raise bad(415, "send the body as application/json or multipart/form-data")
    raw = await body_within(request, limits.json_body())
    try:
        run = RunRequest.model_validate_json(raw or b"")
    except ValidationError as exc:
        raise bad(400, f"invalid body: {invalid(exc)}") from None
    return run, decoded(run.files, limits) if run.files else []


def _command_answer(msg: InboundMessage, routed: Routed) -> web.Response:
    return web.json_response({"status": "command", "command": routed.reason,
                              "text": routed.reply, "conversation_id": msg.conversation_id})


async def run_async(request: web.Request) -> web.Response:
    """Queue a task; answer at once with its id."""
    msg = await _message(request)
    routed = await _submit(request, msg)
    if routed.task_id is None:
        return _command_answer(msg, routed)
    task_id = routed.task_id
    return web.json_response({"task_id": task_id, "status": "queued",
                              "status_url": f"/agent/tasks/{task_id}",
                              "events_url": f"/agent/tasks/{task_id}/events"}, status=202)


async def run_sync(request: web.Request) -> web.Response:
    """Run a task and wait for its answer (or until HERMES_RUN_TIMEOUT: then 202). A task
    started by this process is waited for here, and answered with the state it saved (no
    read back); one queued for any worker, through its event stream (from whichever
    replica runs it), then read."""
    gateway = request.app[GATEWAY]
    msg = await _message(request)
    eventlog, task_id = gateway.parts.eventlog, gateway.parts.queue.new_task_id(
        msg.conversation_id)
    state: TaskState | None = None
    with eventlog.watch(task_id) as finished_here, \
            gateway.parts.opened.store.watch_task(task_id) as written_here:
        routed = await _submit(request, msg, task_id)
        if routed.task_id is None:
            return _command_answer(msg, routed)
        task_id = routed.task_id
        events = finished_here if routed.started_here else eventlog.follow(task_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(gateway.settings.hermes_run_timeout), \
                    contextlib.aclosing(events):
                async for event in events:
                    if event.get("type") == "AGENT_FINISHED" and \
                            (event.get("payload") or {}).get("outcome") in TERMINAL | PAUSED:
                        # Ended here: its state as this process saved it, not read back.
                        state = written_here() if routed.started_here else None
                        break
    if state is None or state.status not in TERMINAL | PAUSED:  # e.g. its save failed
        state = await load_task(gateway, task_id)
    if state.status == "awaiting_approval" and state.approval is not None:
        with contextlib.suppress(TimeoutError):  # answered with its approval decidable
            async with asyncio.timeout(5.0):
                await gateway.parts.approvals.until_open(state.approval.id)
    status = 200 if state.status in TERMINAL | PAUSED else 202
    return web.json_response(view_of(state), status=status)


async def get_task(request: web.Request) -> web.Response:
    """A task's status, result and TaskReport."""
    return web.json_response(view_of(await own_task(request)))


async def load_task(gateway: Gateway, task_id: str) -> TaskState:
    """The task's state, or 404."""
    state = await gateway.parts.opened.store.load_task(task_id)
    if state is None:
        raise bad(404, f"no task {task_id!r}")
    return state


async def own_task(request: web.Request) -> TaskState:
    """The path's task, when the caller may see its conversation or ran it (a job of
    theirs); 404 otherwise."""
    task_id = request.match_info["task_id"]
    state = await load_task(request.app[GATEWAY], task_id)
    caller = caller_of(request)
    if state.user_id != caller.identity:
        visible(caller, state.conversation_id, f"task {task_id!r}")
    return state


def view_of(state: TaskState) -> dict[str, Any]:
    """The public view of a task."""
    return {
        "task_id": state.task_id, "conversation_id": state.conversation_id,
        "status": state.status, "text": state.result_text, "answer": state.answer,
        "question": state.question.model_dump() if state.question else None,
        "approval": state.approval.model_dump() if state.approval else None,
        "error": state.error, "report": state.report or None, "rounds": state.round,
        "budget": state.budget.model_dump() if state.budget else None,
        "created_at": state.created_at, "updated_at": state.updated_at,
        "continued_in": state.extra.get("continued"),
        "events_url": f"/agent/tasks/{state.task_id}/events",
    }


async def task_events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the task's past events, then live ones; resumes after
    Last-Event-ID; ends once the task has finished."""
    gateway = request.app[GATEWAY]
    task_id = (await own_task(request)).task_id  # 404 for unknown (and others') tasks
    after = request.headers.get("Last-Event-ID") or request.query.get("after") or "0-0"
    if not _valid_stream_id(after):
        raise bad(400, "Last-Event-ID must be a stream id like 1712345678901-0")
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
    state = await own_task(request)
    entry = {"type": "task_cancel", "task_id": state.task_id,
             "conversation_id": state.conversation_id}
    if state.status == "queued":
        state.status, state.result_text = "cancelled", "Cancelled before it started."
        await gateway.parts.opened.store.save_task(state)
        await audited(request, caller_of(request), {**entry, "outcome": "cancelled"})
        return web.json_response({"task_id": state.task_id, "status": "cancelled"})
    if state.status != "running":
        raise bad(409, f"task is {state.status}, not running")
    await gateway.parts.queue.signal(state.conversation_id, "stop", state.task_id)
    await audited(request, caller_of(request), {**entry, "outcome": "stopping"})
    return web.json_response({"task_id": state.task_id, "status": "stopping"}, status=202)


_ATTACHMENT = re.compile(ATTACHMENT_NAME)
#: Served inline; anything else is a download the browser will not render (SVG and HTML
#: can carry script).
_INLINE = ("image/png", "image/jpeg", "image/gif", "image/webp", "audio/mpeg", "audio/wav",
           "audio/ogg")


async def task_attachment(request: web.Request) -> web.StreamResponse:
    """A file a tool of the task made for the person (kept in its sandbox's attachments/)."""
    gateway = request.app[GATEWAY]
    state = await own_task(request)
    name = request.match_info["name"]
    if not _ATTACHMENT.match(name) or ".." in name:
        raise bad(400, "an attachment name is letters, digits, '_', '.' and '-'")
    sandbox = Sandbox(sandbox_dir(gateway.settings.hermes_data_dir, state.conversation_id,
                                  state.task_id))
    try:
        # Never through a symlink: one a tool planted there may point anywhere.
        data = await asyncio.to_thread(sandbox.read, f"attachments/{name}")
    except (ToolError, OSError):
        raise bad(404, f"task {state.task_id!r} has no attachment {name!r}") from None
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    inline = kind in _INLINE
    return web.Response(body=data, headers={
        "Content-Type": kind if inline else "application/octet-stream",
        "Content-Disposition": f'{"inline" if inline else "attachment"}; filename="{name}"',
        "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox",
        "Cache-Control": "private, max-age=3600"})


def setup(app: web.Application) -> None:
    """Register the task routes."""
    app.router.add_post("/agent/run", run_sync)
    app.router.add_post("/agent/run-async", run_async)
    app.router.add_get("/agent/tasks/{task_id}", get_task)
    app.router.add_get("/agent/tasks/{task_id}/events", task_events)
    app.router.add_post("/agent/tasks/{task_id}/cancel", cancel_task)
    app.router.add_get("/agent/tasks/{task_id}/attachments/{name}", task_attachment)
