"""Dead letters (admins only): the replies given up on, newest first; redeliver one (it is
taken off the list and sent again; failing again, it is dead-lettered again with the new
reason) or discard it. Both are audited with who did it."""

from __future__ import annotations

from aiohttp import web

from ..openapi import MAX_DEAD_LETTERS
from ._http import GATEWAY, audited, bad, number
from .console import admin


async def list_dead_letters(request: web.Request) -> web.Response:
    """The newest dead letters (``limit``: 100 by default) and how many there are."""
    admin(request, "limit")
    letters = request.app[GATEWAY].parts.console.dead_letters
    limit = int(number(request, "limit", low=1, high=MAX_DEAD_LETTERS, default=100,
                       integer=True) or 100)
    newest, count = await letters.page(limit)
    return web.json_response({"count": count,
                              "dead_letters": [letter.view() for letter in newest]})


async def redeliver(request: web.Request) -> web.Response:
    """Send one again: 200 with ``delivered`` true, or false and the new ``reason``."""
    caller = admin(request)
    letters = request.app[GATEWAY].parts.console.dead_letters
    done = await letters.redeliver(request.match_info["letter_id"])
    if done is None:
        raise bad(404, "no such dead letter (already redelivered or discarded?)")
    view = done.letter.view()
    await audited(request, caller, {
        "type": "dead_letter", "action": "redeliver", "letter_id": view["id"],
        "channel": view["channel"], "conversation_id": view["conversation_id"],
        "task_id": view["task_id"], "outcome": done.outcome,
        **({"reason": done.reason} if done.reason else {})})
    return web.json_response({"id": view["id"], "delivered": done.outcome == "sent",
                              "reason": done.reason or None})


async def discard(request: web.Request) -> web.Response:
    """Drop one for good."""
    caller = admin(request)
    letters = request.app[GATEWAY].parts.console.dead_letters
    letter = await letters.take(request.match_info["letter_id"])
    if letter is None:
        raise bad(404, "no such dead letter (already redelivered or discarded?)")
    view = letter.view()
    await audited(request, caller, {
        "type": "dead_letter", "action": "discard", "letter_id": view["id"],
        "channel": view["channel"], "conversation_id": view["conversation_id"],
        "task_id": view["task_id"], "outcome": "discarded"})
    return web.json_response({"id": view["id"], "discarded": True})


def setup(app: web.Application) -> None:
    """Register the dead-letter routes."""
    app.router.add_get("/agent/dead-letters", list_dead_letters)
    app.router.add_post("/agent/dead-letters/{letter_id}/redeliver", redeliver)
    app.router.add_delete("/agent/dead-letters/{letter_id}", discard)
