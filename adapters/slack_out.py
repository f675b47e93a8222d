"""Slack's side of live replies (``adapters/live.py``): answers streamed with
chat.startStream / appendStream / stopStream (tool steps as ``task_update`` chunks), or one
message edited in place where a stream cannot be used; every post tagged with its delivery
in the message's metadata (``hermes_delivery``), so that after an unanswered request the
gateway can look for it (conversations.replies / .history) instead of posting it twice;
the assistant thread's status; feedback buttons under an answer.

Idempotent steps: ``edit`` (chat.update), ``find``, ``status``, ``discard``, and ``append``
in edit mode. Not: ``open``, ``post``, ``append`` to a stream, ``stop``.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from .approvals import slack_blocks, slack_choice_blocks, slack_rerun_blocks
from .base import OutboundMessage
from .errors import DeliveryError
from .live import LIVE_PART, Display, LiveMode, Primitive, Step, Tag
from .markup import slack_escape, split_text, to_mrkdwn
from .pacing import Pacer

log = logging.getLogger(__name__)

TEXT_LIMIT = 3500  # Slack truncates long messages; stay well under its 4000 guidance
PART_LIMIT = 3000  # of Markdown: its mrkdwn, a little longer, stays under TEXT_LIMIT
WORKING = "⏳ Working on it…"
REPEATED = "_(This may repeat an earlier message.)_"
DELIVERY_EVENT = "hermes_delivery"
FEEDBACK = "hermes_feedback"
_PERMANENT = {"channel_not_found", "not_in_channel", "is_archived", "invalid_auth",
              "account_inactive", "token_revoked", "no_permission", "msg_too_long"}
#: ok:false answers that a later attempt may not get (the rest describe the request).
_TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
#: Errors of a request that never reached Slack: safe to send again.
_UNSENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)

_EDIT_STEPS: frozenset[Primitive] = frozenset({"edit", "find", "status", "discard",
                                               "append"})
IDEMPOTENT: dict[LiveMode, frozenset[Primitive]] = {
    "stream": frozenset({"edit", "find", "status", "discard"}),
    "edit": _EDIT_STEPS, "draft": _EDIT_STEPS, "final": _EDIT_STEPS}


def delivery_metadata(tag: Tag) -> dict[str, Any]:
    """The message metadata a post carries, to be found again."""
    return {"event_type": DELIVERY_EVENT,
            "event_payload": {"delivery": tag.delivery, "part": tag.part}}


def feedback_block(delivery: str) -> dict[str, Any]:
    """👍 / 👎 under an answer (Slack's feedback buttons)."""
    def button(emoji: str, value: str, label: str) -> dict[str, Any]:
        return {"text": {"type": "plain_text", "text": emoji}, "value": f"{value}:{delivery}",
                "accessibility_label": label}

    return {"type": "context_actions", "elements": [{
        "type": "feedback_buttons", "action_id": FEEDBACK,
        "positive_button": button("👍", "good", "Mark this answer as helpful"),
        "negative_button": button("👎", "bad", "Mark this answer as not helpful")}]}


def _markdown(text: str) -> dict[str, Any]:
    """A markdown block: Markdown as written, with &, < and > as Slack's entities (a model's
    ``<!channel>`` is text, never a mention)."""
    return {"type": "markdown", "text": slack_escape(text)}


def step_chunk(step: Step) -> dict[str, Any]:
    """A tool step as a stream's task_update chunk."""
    return {"type": "task_update", "id": step.id[:64], "title": step.title[:256],
            "status": step.status}


def _plan_chunk(display: Display) -> list[dict[str, Any]]:
    """The plan's title as a plan_update chunk, when it changed."""
    if not display.plan_new or not display.plan:
        return []
    return [{"type": "plan_update", "title": slack_escape(display.plan)[:256]}]


def _changes(display: Display) -> list[dict[str, Any]]:
    """The chunks of what changed since the stream's last append: the plan, the steps."""
    return _plan_chunk(display) + [step_chunk(s) for s in display.steps_new]


class SlackOutbound:
    """The outbound half of ``SlackChannel``: its Web API calls, paced, failures sorted."""

    client: AsyncWebClient
    pacer: Pacer
    channel_interval: float
    streaming: bool
    feedback: bool
    progress_mode: str
    bot_user_id: str | None
    bot_id: str | None
    #: Channels where a stream could not be started: edited messages there instead.
    _no_stream: set[str]
    #: Threads whose assistant status could not be set (not assistant threads).
    _no_status: set[str]
    #: Messages with the ⏳ reaction on them now (SLACK_PROGRESS=reaction).
    _reacted: set[str]
    ref_key = "ts"
    idempotent = IDEMPOTENT

    # --- the reply's shape ------------------------------------------------------------------
    def live_mode(self, target: dict[str, Any]) -> LiveMode:
        if self.streaming and target.get("thread_ts") and \
                target.get("channel") not in self._no_stream:
            return "stream"
        if self.streaming or self.progress_mode == "message":
            return "edit"
        return "final"

    def opens_at_start(self, mode: LiveMode) -> bool:
        """The working message is posted when the task starts."""
        return mode == "edit" and self.progress_mode == "message"

    def interval(self, mode: LiveMode) -> float:
        return 0.3 if mode == "stream" else self.channel_interval

    def no_stream_in(self, channel: str) -> None:
        """Streams failed here: edit messages in this channel from now on."""
        self._no_stream.add(channel)

    def split(self, message: OutboundMessage) -> list[str]:
        if message.kind == "approval" and message.approval is not None:
            return [message.text]
        return split_text(message.text, PART_LIMIT) or ["(empty answer)"]

    # --- posting and finding ------------------------------------------------------------------
    async def post(self, message: OutboundMessage, part: int, *, tag: Tag,
                   repeat: bool = False) -> dict[str, Any]:
        parts = self.split(message)
        text = to_mrkdwn(parts[part])
        if repeat:
            text = f"{text}\n{REPEATED}"
        target = message.reply_target
        channel = target["channel"]
        extra: dict[str, Any] = {}
        if part == len(parts) - 1:
            extra = self._last_blocks(message, parts[part], tag, repeat=repeat)
        response = await self._call("chat_postMessage", {f"slack:{channel}": 1.0},
                                    channel=channel, text=text[:TEXT_LIMIT + 200],
                                    thread_ts=target.get("thread_ts"),
                                    metadata=delivery_metadata(tag), **extra)
        return {"channel": response["channel"], "ts": response["ts"]}

    def _last_blocks(self, message: OutboundMessage, part: str, tag: Tag, *,
                     repeat: bool = False) -> dict[str, Any]:
        """The blocks the last part carries: buttons (an approval, a question's choices) or
        an answer's feedback buttons under its text."""
        if message.kind == "approval" and message.approval is not None:
            return {"blocks": slack_blocks(message)}
        if message.choices:
            return {"blocks": slack_choice_blocks(message)}
        if message.rerun is not None:
            return {"blocks": slack_rerun_blocks(to_mrkdwn(part), message.rerun)}
        if self.feedback and message.kind == "answer" and message.task_id:
            shown = f"{part}\n\n{REPEATED}" if repeat else part
            return {"blocks": [_markdown(shown), feedback_block(tag.delivery)]}
        return {}

    async def find(self, target: dict[str, Any], tag: Tag, *,
                   known: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        channel, thread = target["channel"], target.get("thread_ts")
        after = target.get("message_ts") or thread or "0"
        if thread:
            response = await self._call("conversations_replies", {}, channel=channel,
                                        ts=thread, oldest=after, include_all_metadata=True,
                                        limit=200)
        else:
            response = await self._call("conversations_history", {}, channel=channel,
                                        oldest=after, include_all_metadata=True, limit=200)
        messages = list(response.get("messages") or [])
        for m in messages:
            payload = (m.get("metadata") or {}).get("event_payload") or {}
            if (m.get("metadata") or {}).get("event_type") == DELIVERY_EVENT and \
                    payload.get("delivery") == tag.delivery and payload.get("part") == tag.part:
                return {"channel": channel, "ts": m["ts"]}
        if tag.part == LIVE_PART:
            # A stream carries no metadata until it stops: ours, after the question, and
            # not a message this reply knows.
            seen = {str(k.get("ts")) for k in known or []}
            for m in messages:
                ours = m.get("bot_id") == self.bot_id or m.get("user") == self.bot_user_id
                if ours and not m.get("metadata") and m["ts"] not in seen and m["ts"] != thread:
                    return {"channel": channel, "ts": m["ts"]}
        return None

    # --- the live message -----------------------------------------------------------------------
    async def open(self, target: dict[str, Any], mode: LiveMode, display: Display, *,
                   tag: Tag) -> dict[str, Any] | None:
        channel = target["channel"]
        if mode == "stream":
            chunks = _plan_chunk(display) + [step_chunk(s) for s in display.steps]
            # A task that starts with steps shows them as a plan (all together); one that
            # starts writing, as a timeline.
            response = await self._call(
                "chat_startStream", {f"slack:{channel}": 1.0}, channel=channel,
                thread_ts=target["thread_ts"], recipient_team_id=target.get("team"),
                recipient_user_id=target.get("user"),
                markdown_text=slack_escape(display.delta) or None,
                chunks=chunks or None,
                task_display_mode="plan" if chunks and display.began_with_steps
                else "timeline")
        else:
            response = await self._call(
                "chat_postMessage", {f"slack:{channel}": 1.0}, channel=channel,
                text=self._working_text(display), thread_ts=target.get("thread_ts"),
                metadata=delivery_metadata(tag))
        return {"channel": response["channel"], "ts": response["ts"]}

    async def append(self, ref: dict[str, Any] | None, target: dict[str, Any],
                     mode: LiveMode, display: Display, *, tag: Tag) -> None:
        assert ref is not None
        # An update that would have to wait (Slack asked us to slow down) is not sent: the
        # next one carries what it had.
        key = f"slack:{'stream' if mode == 'stream' else 'update'}:{ref['ts']}"
        if not self.pacer.try_take({key: 0.0}):
            raise DeliveryError("slack: held back by a rate limit", retryable=True,
                                code="paced")
        if mode == "stream":
            chunks = _changes(display)
            if not display.delta and not chunks:
                return
            await self._call("chat_appendStream", {key: 0.0}, channel=ref["channel"],
                             ts=ref["ts"], markdown_text=slack_escape(display.delta) or None,
                             chunks=chunks or None)
            return
        await self._call("chat_update", {key: 0.0}, channel=ref["channel"], ts=ref["ts"],
                         text=self._working_text(display))

    def _working_text(self, display: Display) -> str:
        """The live message in edit mode: the answer so far (when streaming) and the
        latest step, or "working" and the step."""
        if self.streaming and display.text.strip():
            shown = to_mrkdwn(display.text)[:TEXT_LIMIT]
            return f"{shown}\n\n_{display.line}_" if display.line else f"{shown} …"
        return f"{WORKING}\n{display.line}" if display.line else WORKING

    async def stop_stream(self, ref: dict[str, Any], message: OutboundMessage, *,
                          rest: str | None, tag: Tag, display: Display | None = None) -> None:
        parts = self.split(message)
        blocks = [feedback_block(tag.delivery)] if (
            self.feedback and len(parts) == 1 and message.kind == "answer"
            and message.task_id) else None
        await self._call("chat_stopStream", {}, channel=ref["channel"], ts=ref["ts"],
                         markdown_text=slack_escape(rest or "") or None, blocks=blocks,
                         chunks=_changes(display) if display else None,
                         metadata=delivery_metadata(tag))

    async def edit(self, ref: dict[str, Any], message: OutboundMessage, part: int, *,
                   tag: Tag) -> None:
        parts = self.split(message)
        blocks: list[dict[str, Any]] = [_markdown(parts[part])]
        if part == len(parts) - 1:
            blocks = self._last_blocks(message, parts[part], tag).get("blocks", blocks)
        await self._call("chat_update", {f"slack:update:{ref['ts']}": 0.0},
                         channel=ref["channel"], ts=ref["ts"],
                         text=to_mrkdwn(parts[part])[:TEXT_LIMIT + 200], blocks=blocks,
                         metadata=delivery_metadata(tag))

    async def discard(self, ref: dict[str, Any]) -> None:
        try:
            await self._call("chat_delete", {}, channel=ref["channel"], ts=ref["ts"])
        except DeliveryError as exc:
            if exc.code != "message_not_found":
                raise

    async def status(self, target: dict[str, Any], line: str | None) -> None:
        thread = target.get("thread_ts")
        stamp = target.get("message_ts")
        if self.progress_mode == "reaction" and stamp and (line is None) == (
                stamp in self._reacted):
            # ⏳ on the person's message while the task works (added once, then taken off).
            method = "reactions_add" if line is not None else "reactions_remove"
            if line is not None:
                self._reacted.add(stamp)
            else:
                self._reacted.discard(stamp)
            await self._quietly(method, channel=target["channel"], timestamp=stamp,
                                name="hourglass_flowing_sand")
        if not thread or f"{target['channel']}:{thread}" in self._no_status:
            return
        try:
            await self._call("assistant_threads_setStatus", {},
                             channel_id=target["channel"], thread_ts=thread,
                             status=line or "")
        except DeliveryError as exc:
            if not exc.retryable:  # not an assistant thread, or no assistant:write scope
                self._no_status.add(f"{target['channel']}:{thread}")
            raise

    # --- calls ------------------------------------------------------------------------------------
    async def _call(self, method: str, limits: dict[str, float], **kwargs: Any) -> Any:
        """One Web API call, paced by ``limits``; failures as DeliveryError with whether
        Slack may have carried it out (``applied``)."""
        if limits:
            await self.pacer.wait(limits)
        try:
            return await getattr(self.client, method)(**kwargs)
        except SlackApiError as exc:
            response = exc.response
            error = str(response.get("error", "")) if response is not None else ""
            status = getattr(response, "status_code", 0) if response is not None else 0
            if status == 429 or error == "ratelimited":
                retry = float(response.headers.get("Retry-After", 1)) if response else 1.0
                for key in limits:
                    self.pacer.hold(key, retry)
                raise DeliveryError(f"slack {method} rate limited", retryable=True,
                                    retry_after=retry) from exc
            maybe = status >= 500 or error in _TRANSIENT
            raise DeliveryError(f"slack {method} failed: {error or status}",
                                retryable=maybe or (error not in _PERMANENT and status not in (
                                    200, 400)), applied="maybe" if maybe else "no",
                                code=error) from exc
        except _UNSENT as exc:
            raise DeliveryError(f"slack {method}: {type(exc).__name__}", retryable=True) \
                from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            # Sent, and the answer lost: Slack may have done it.
            raise DeliveryError(f"slack {method}: {type(exc).__name__}", retryable=True,
                                applied="maybe") from exc

    async def _quietly(self, method: str, **kwargs: Any) -> None:
        try:
            await getattr(self.client, method)(**kwargs)
        except Exception as exc:
            log.info("slack %s failed: %s", method, exc)
