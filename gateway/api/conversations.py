"""Conversations: forget one (everything it stored), or start a fresh session."""

from __future__ import annotations

from aiohttp import web

from agent_core.store import CONVERSATION_ID

from ._http import GATEWAY, bad


def _conversation(request: web.Request) -> str:
    cid = request.match_info["conversation_id"]
    if not CONVERSATION_ID.match(cid):
        raise bad(400, "invalid conversation id")
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


def setup(app: web.Application) -> None:
    """Register the conversation routes."""
    app.router.add_delete("/agent/conversations/{conversation_id}", forget_conversation)
    app.router.add_post("/agent/conversations/{conversation_id}/reset", reset_conversation)
