"""What the operator's console reads (admins only): the overview, the last hour minute by
minute, tokens used, the conversation search, one conversation, one task with its events,
and the live event stream (server-sent events from every replica, through the store)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from aiohttp import web

from agent_core import TaskState
from agent_core.store import CONVERSATION_ID, as_text
from agent_core.tools.sandbox import inbox_dir, sandbox_dir

from ..activity import channel_of
from ..openapi import MAX_SEARCH, MAX_SERIES_MINUTES, MAX_USAGE_DAYS
from ..service import Gateway
from ._http import GATEWAY, Caller, bad, caller_of, number, only
from .tasks import load_task, view_of

#: What one conversation's page lists.
MAX_TASKS = 100
MAX_FILES = 200


def admin(request: web.Request, *params: str) -> Caller:
    """The caller, when its key's role is an admin's; 403 saying so otherwise (400 for a
    query parameter other than ``params``)."""
    caller = caller_of(request)
    if not caller.admin:
        raise bad(403, f"{caller.principal.name!r} is not an admin (its key's role is "
                       f"{caller.role!r}); the console needs an admin key")
    only(request, *params)
    return caller


async def overview(request: web.Request) -> web.Response:
    """The system now: open tasks by status and channel, the oldest queued work, model
    calls under way, approvals waiting, dead letters, the serving processes, the hub, and
    the tasks that changed last."""
    admin(request)
    gateway = request.app[GATEWAY]
    parts = gateway.parts
    now = await parts.console.overview.now()
    recent = await parts.console.overview.recent_tasks(20)
    bus = parts.bus
    now["hub"] = "off" if bus is None else ("connected" if bus.nc.is_connected
                                            else "unreachable")
    now["model_name"] = parts.runtime.model.name if gateway.model_ready else None
    now["recent_tasks"] = [summary(s) for s in recent]
    return web.json_response(now)


async def series(request: web.Request) -> web.Response:
    """The charts' series, minute by minute (``minutes``: 60 by default, at most 120)."""
    admin(request, "minutes")
    minutes = int(number(request, "minutes", low=1, high=MAX_SERIES_MINUTES, default=60,
                         integer=True) or 60)
    return web.json_response(await request.app[GATEWAY].parts.console.overview.series(
        minutes))


async def usage(request: web.Request) -> web.Response:
    """Tokens of the last ``days`` UTC days by user, channel and model (the budgets'
    limits, where budgets exist, are GET /agent/usage's)."""
    admin(request, "days")
    days = int(number(request, "days", low=1, high=MAX_USAGE_DAYS, default=1, integer=True)
               or 1)
    return web.json_response(await request.app[GATEWAY].parts.console.overview.usage(days))


async def conversations(request: web.Request) -> web.Response:
    """Conversations whose id contains ``q`` (a channel's name finds its own), or where a
    user whose name contains it spoke; most recently active first."""
    admin(request, "q", "limit")
    parts = request.app[GATEWAY].parts
    query = request.query.get("q", "").strip()
    if len(query) > 200:
        raise bad(400, "q is too long")
    limit = int(number(request, "limit", low=1, high=MAX_SEARCH, default=50, integer=True)
                or 50)
    store = parts.opened.store
    pipe = store.redis.pipeline(transaction=False)
    for key in store.keys.all_conversations():  # every shard's, most recent first
        pipe.zrevrange(key, 0, 4999, withscores=True)
    rows: Any = sorted((row for shard in await pipe.execute() for row in shard),
                       key=lambda row: -float(row[1]))[:5000]
    found: dict[str, dict[str, Any]] = {}
    needle = query.lower()
    for member, score in rows:
        cid = as_text(member)
        if needle in cid.lower():
            found[cid] = {"conversation_id": cid, "channel": channel_of(cid),
                          "last_active": float(score), "users": []}
            if len(found) >= limit:
                break
    for who, cid, at in await parts.console.overview.people(query, limit):
        entry = found.setdefault(cid, {"conversation_id": cid, "channel": channel_of(cid),
                                       "last_active": at, "users": []})
        if who not in entry["users"]:
            entry["users"].append(who)
        entry["last_active"] = max(entry["last_active"], at)
    shown = sorted(found.values(), key=lambda c: c["last_active"], reverse=True)[:limit]
    return web.json_response({"q": query, "conversations": shown})


async def conversation(request: web.Request) -> web.Response:
    """One conversation: its tasks (each request, what its person was told, how it went),
    newest last, and the files people sent and tools made in it."""
    admin(request)
    gateway = request.app[GATEWAY]
    cid = request.match_info["conversation_id"]
    if not CONVERSATION_ID.match(cid):
        raise bad(400, "invalid conversation id")
    tasks = await gateway.parts.opened.store.recent_tasks(cid, MAX_TASKS)
    files = await asyncio.to_thread(_files, gateway, cid, [t.task_id for t in tasks])
    return web.json_response({"conversation_id": cid, "channel": channel_of(cid),
                              "tasks": [summary(t) for t in tasks], "files": files})


async def task(request: web.Request) -> web.Response:
    """One task: its state, its events (what the timeline draws), its trace id and, with
    HERMES_TRACE_URL, the link to its trace."""
    admin(request)
    gateway = request.app[GATEWAY]
    state = await load_task(gateway, request.match_info["task_id"])
    events = await gateway.parts.eventlog.read(state.task_id, count=2000)
    pattern = gateway.settings.hermes_trace_url
    return web.json_response({
        "task": {**view_of(state), **summary(state)}, "events": events,
        "trace_id": state.trace_id,
        "trace_url": pattern.replace("{trace_id}", state.trace_id) if pattern else None})


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: what happens from now on (or after Last-Event-ID), on every
    replica: tasks changing state (``task``), audit entries (``audit``: approvals decided,
    write tools run, operators' actions), dead letters (``dead_letter``)."""
    admin(request, "after", "access_token")
    gateway = request.app[GATEWAY]
    store = gateway.parts.opened.store
    feed = store.keys.console.feed()
    after = request.headers.get("Last-Event-ID") or request.query.get("after")
    if after is None:  # from now: the newest entry's id
        newest = await store.redis.xrevrange(feed, count=1)
        after = as_text(newest[0][0]) if newest else "0-0"
    head, _, tail = after.partition("-")
    if not (head.isdigit() and (tail.isdigit() or tail == "")):
        raise bad(400, "Last-Event-ID must be a stream id like 1712345678901-0")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    await response.write(b"retry: 2000\n: connected\n\n")
    try:
        async for item in gateway.parts.eventlog.follow_stream(feed, after, poll=15.0):
            if item.get("type") == "KEEPALIVE":
                await response.write(b": keepalive\n\n")
                continue
            data = json.dumps(item, ensure_ascii=False, default=str)
            await response.write(f"id: {item['id']}\nevent: {item.get('kind', 'message')}\n"
                                 f"data: {data}\n\n".encode())
    except (ConnectionResetError, asyncio.CancelledError):
        return response
    await response.write_eof()
    return response


def summary(state: TaskState) -> dict[str, Any]:
    """What the console lists of a task."""
    report = state.report or {}
    return {"task_id": state.task_id, "conversation_id": state.conversation_id,
            "channel": channel_of(state.conversation_id), "user_id": state.user_id,
            "status": state.status, "instruction": state.instruction[:2000],
            "text": (state.result_text or "")[:4000], "error": state.error,
            "created_at": state.created_at, "updated_at": state.updated_at,
            "rounds": state.round,
            "approval": state.approval.model_dump() if state.approval else None,
            "model_calls": report.get("model_calls"), "wall_time": report.get("wall_time"),
            "tokens": (report.get("prompt_tokens") or 0) + (report.get("completion_tokens")
                                                            or 0)}


def _files(gateway: Gateway, cid: str, task_ids: list[str]) -> list[dict[str, Any]]:
    """The files people sent in the conversation (its inbox) and those its tasks' tools
    made for them (each task's attachments/), never through a link."""
    data = gateway.settings.hermes_data_dir
    places: list[tuple[Path, str | None]] = [(inbox_dir(data, cid), None)]
    places += [(sandbox_dir(data, cid, t) / "attachments", t) for t in task_ids]
    found: list[dict[str, Any]] = []
    for folder, task_id in places:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                found.append({"name": entry.name, "bytes": info.st_size,
                              "modified": info.st_mtime, "task_id": task_id,
                              "kind": "sent" if task_id is None else "made"})
            if len(found) >= MAX_FILES:
                return found
    return sorted(found, key=lambda f: f["modified"])


def setup(app: web.Application) -> None:
    """Register the console's routes."""
    app.router.add_get("/agent/console/overview", overview)
    app.router.add_get("/agent/console/series", series)
    app.router.add_get("/agent/console/usage", usage)
    app.router.add_get("/agent/console/conversations", conversations)
    app.router.add_get("/agent/console/conversations/{conversation_id:.+}", conversation)
    app.router.add_get("/agent/console/tasks/{task_id}", task)
    app.router.add_get("/agent/console/events", events)
