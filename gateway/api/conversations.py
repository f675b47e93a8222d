"""Conversations: their recent messages (what a chat page shows after a reload), forget
one (everything it stored), or start a fresh session."""

from __future__ import annotations

from aiohttp import web

from agent_core import PAUSED, TERMINAL, TaskState
from agent_core.store import CONVERSATION_ID
from agent_core.task import ACTIVE

from ..forgetting import forget
from ..inbox import SENT_FILES
from ..openapi import MAX_HISTORY
from ._http import GATEWAY, bad, caller_of, number, visible


def conversation_in_path(request: web.Request) -> str:
    """The path's conversation, when the caller may see it (its own, or any for an
    admin); 404 otherwise."""
    cid = request.match_info["conversation_id"]
    if not CONVERSATION_ID.match(cid):
        raise bad(400, "invalid conversation id")
    visible(caller_of(request), cid, f"conversation {cid!r}")
    return cid


async def recent_messages(request: web.Request) -> web.Response:
    """The conversation's last tasks as messages (each one's request, with the files it
    carried, and what its person was told), oldest first, and the tasks still under way or
    waiting for a person."""
    gateway = request.app[GATEWAY]
    cid = conversation_in_path(request)
    limit = int(number(request, "limit", low=1, high=MAX_HISTORY, default=20, integer=True)
                or 20)
    tasks = await gateway.parts.opened.store.recent_tasks(cid, limit)
    messages: list[dict[str, object]] = []
    open_tasks: list[dict[str, object]] = []
    for state in tasks:
        messages.append(_message(state, "user", state.instruction, state.created_at))
        if state.extra.get("continued"):  # a reply to a question: only the user's turn
            continue
        if state.status in TERMINAL and not state.superseded:
            messages.append(_message(state, "assistant", state.result_text or "",
                                     state.updated_at))
        elif state.status in PAUSED | ACTIVE:
            open_tasks.append({
                "task_id": state.task_id, "status": state.status,
                "text": state.result_text if state.status in PAUSED else None,
                "approval": state.approval.model_dump() if state.approval else None,
                "question": state.question.model_dump() if state.question else None,
                "events_url": f"/agent/tasks/{state.task_id}/events"})
    # By time: a question's answer comes after the reply that continued its task.
    messages.sort(key=lambda m: float(m["at"]))  # type: ignore[arg-type]
    return web.json_response({"conversation_id": cid, "messages": messages,
                              "open_tasks": open_tasks})


def _message(state: TaskState, role: str, text: str, at: float) -> dict[str, object]:
    message: dict[str, object] = {"task_id": state.task_id, "role": role, "text": text,
                                  "status": state.status, "at": at}
    files = state.extra.get(SENT_FILES)
    if role == "user" and files:
        message["files"] = files
    return message


async def forget_conversation(request: web.Request) -> web.Response:
    """Delete everything a conversation stored, its files too (a user's "forget me")."""
    gateway = request.app[GATEWAY]
    cid = conversation_in_path(request)
    deleted = await forget(gateway.parts.opened.store, gateway.settings.hermes_data_dir, cid)
    return web.json_response({"conversation_id": cid, "deleted_keys": deleted})


async def reset_conversation(request: web.Request) -> web.Response:
    """Start a fresh session; the archive stays searchable."""
    gateway = request.app[GATEWAY]
    cid = conversation_in_path(request)
    await gateway.parts.opened.store.reset(cid)
    return web.json_response({"conversation_id": cid, "reset": True})


def setup(app: web.Application) -> None:
    """Register the conversation routes."""
    app.router.add_get("/agent/conversations/{conversation_id}/messages", recent_messages)
    app.router.add_delete("/agent/conversations/{conversation_id}", forget_conversation)
    app.router.add_post("/agent/conversations/{conversation_id}/reset", reset_conversation)
