"""The gateway's own agent in the Synadia Agent Protocol (``agents.prompt.gateway.<owner>
.default``, beside the hub's agents the bridge registers: ``hub.bridges.sap_host``).

A prompt is routed like an API message, in a conversation of its own
(``api:sap-<prompt>``), as the user ``sap:<the sender's NATS user key>`` (``sap:unsigned``
when unsigned prompts are allowed), whose role HERMES_ROLES gives; the reply to a question
it asks comes back as the next message of that conversation. Its tool calls are told to
the caller as they start (status chunks: their names and notes, never their arguments).
Its task's end is the answer: answered is ``success``, a question or a pending approval
``partial``, anything else ``failed`` (its status, upper-cased). A prompt's attachments
are the message's files (under the limits of a message's files; a file past one is
refused, INVALID_ARGUMENTS), kept in the store until the worker moves them into the
conversation's inbox, as the API's are.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import logging
import mimetypes
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pybase64

from adapters.base import Attachment, InboundMessage
from agent_core import PAUSED, TERMINAL
from agent_core.attachments import safe_name
from agent_core.ids import new_id

from .fetching import FileLimits

if TYPE_CHECKING:
    from hub.bridges.sap_host import Answer

    from .eventlog import EventLog
    from .service import Gateway

log = logging.getLogger(__name__)

AGENT_ID = "gateway"
_POLL = 0.2


class GatewayAgent:
    """The gateway's agent, as a local agent of the bridge (``LocalAgent``)."""

    agent_id = AGENT_ID
    capabilities: tuple[str, ...] = ("chat",)

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def answer(self, text: str, *, attachments: list[dict[str, str]], thread: str,
                     sender: str | None, deadline_ms: int,
                     progress: Callable[[str], Awaitable[None]]) -> Answer:
        from hub.bridges.sap_host import Answer

        files = _decoded(attachments, FileLimits(self.gateway.settings))
        if isinstance(files, str):
            return Answer("failed", {"error": files}, "INVALID_ARGUMENTS")
        try:
            parts = self.gateway.parts
        except RuntimeError:
            return Answer("failed", {"error": "the gateway is starting"}, "NOT_READY")
        since = time.time()
        conversation = f"api:sap-{thread}"
        message = InboundMessage(
            channel="api", conversation_id=conversation,
            user_id=f"sap:{sender or 'unsigned'}", text=text, is_direct=True,
            mentions_bot=True, platform_message_id=f"sap:{new_id()}")
        for name, data in files:
            message.attachments.append(Attachment(
                source="stash", name=name, size=len(data),
                mime_type=mimetypes.guess_type(name)[0] or "application/octet-stream",
                ref=await parts.inbox.stash.put(conversation, data)))
        routed = await parts.router.ingest(message)
        if routed.status == "command":
            return Answer("success", {"answer": routed.reply or ""})
        if routed.task_id is None:
            return Answer("failed", {"error": f"{routed.status}: {routed.reason}"}, "REFUSED")
        limit = since + deadline_ms / 1000
        store = parts.opened.store
        told = asyncio.create_task(_tell(parts.eventlog, routed.task_id, progress))
        try:
            while True:
                state = await store.load_task(routed.task_id)
                if state is not None and state.updated_at >= since and (
                        state.status in TERMINAL or state.status in PAUSED):
                    return _answer_of(state)
                if time.time() > limit:
                    return Answer("failed", {"error": "no answer in time"}, "TIMEOUT")
                await asyncio.sleep(_POLL)
        finally:
            told.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await told


async def _tell(eventlog: EventLog, task_id: str, progress: Callable[[str], Awaitable[None]]
                ) -> None:
    """The task's tool calls, as they start and say what they do, told to the caller
    (their names and notes; never their arguments)."""
    try:
        async for event in eventlog.follow(task_id):
            payload = event.get("payload") or {}
            if event.get("type") == "TOOL_STARTED":
                await progress(f"tool: {payload.get('tool')}")
            elif event.get("type") == "TOOL_PROGRESS":
                await progress(f"{payload.get('tool')}: {payload.get('note')}")
    except Exception as exc:  # the store unreachable: the answer still comes
        log.info("progress of %s not followed: %s", task_id, type(exc).__name__)


def _decoded(attachments: list[dict[str, str]], limits: FileLimits
             ) -> list[tuple[str, bytes]] | str:
    """The prompt's files (a safe name, the bytes), or why they are refused: a limit of a
    message's files, or content that is not base64."""
    reason = limits.too_many(len(attachments))
    if reason:
        return reason
    files: list[tuple[str, bytes]] = []
    for item in attachments:
        name = safe_name(str(item.get("filename") or ""), fallback="file")
        content = str(item.get("content") or "")
        reason = limits.too_big(name, len(content) * 3 // 4)
        if reason:
            return reason
        try:
            files.append((name, pybase64.b64decode(content, validate=True)))
        except (binascii.Error, ValueError):
            return f"{name[:100]!r}: its content is not base64"
    return limits.too_much(sum(len(data) for _, data in files)) or files


def _answer_of(state: Any) -> Answer:
    """A gateway task's end, as the bridge answers it."""
    from hub.bridges.sap_host import Answer

    if state.status == "answered":
        return Answer("success", {"answer": state.answer or state.result_text or ""})
    if state.status in PAUSED:
        question = state.result_text or (state.question.text if state.question else "")
        return Answer("partial", {"question": question or "More input is needed.",
                                  "next_steps": [{"intent": "chat"}]})
    if state.status == "cancelled":
        return Answer("failed", {"error": state.result_text or "cancelled"}, "CANCELLED")
    return Answer("failed", {"error": state.error or state.result_text or ""},
                  state.status.upper())
