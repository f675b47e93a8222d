"""Slack: slack-bolt's AsyncApp over the Events API (``POST /slack/events``) or Socket Mode.

- ``app_mention`` in a channel: one conversation per thread, answered in that thread
- ``message.im``: one conversation per DM
- bots (ourselves included) are ignored; the ``<@BOT>`` mention is stripped; a mention that
  Slack also delivers as a ``message`` event, and Slack's retries, are handled once (the
  delivery identity is the message itself, ``team:channel:ts``, not the event)
- button presses (Approve / Reject, an offered answer) become one ``Interaction``
- the request is acknowledged as soon as the message is durably queued (well under 3 s)
- replies shown live (``slack_out.py``): streamed into the thread (chat.startStream), or a
  "working" message edited in place, or a reaction (SLACK_PROGRESS); the assistant
  thread's status; answers split under Slack's limits, paced per channel, tagged with their
  delivery in the message metadata; 👍 / 👎 under an answer
- assistant threads: suggested prompts when one starts, its title from the first question
- an edited message (``message_changed``) comes in as an edit of the one it replaces
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.internals import parse_body
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from .approvals import APPROVE, CHOICE, REJECT, RERUN
from .base import (
    Attachment,
    FileToShow,
    InboundMessage,
    Ingest,
    Interact,
    Interaction,
    OutboundMessage,
)
from .files import SLACK_FILE_HOSTS, host_of, slack_attachments, stream
from .live import LiveChannel
from .markup import slack_escape
from .pacing import Pacer
from .slack_out import FEEDBACK, WORKING, SlackOutbound

log = logging.getLogger(__name__)

__all__ = ["WORKING", "SlackChannel"]

_IGNORED_SUBTYPES = {"bot_message", "message_deleted", "channel_join", "channel_leave",
                     "message_replied", "thread_broadcast"}
#: Threads titled by this process (the first question of an assistant thread names it).
_TITLED_LIMIT = 10_000


#: Set in a bolt context once a listener hands its message to the queue (see _on_error).
_QUEUEING = "hermes_queueing"


class SlackChannel(SlackOutbound, LiveChannel):
    """The Slack channel: a bolt AsyncApp plus the Web API client it shares."""

    name = "slack"

    def __init__(
        self,
        *,
        bot_token: str,
        signing_secret: str | None,
        app_token: str | None = None,
        api_url: str = "https://slack.com/api/",
        ingest: Ingest,
        interact: Interact | None = None,
        progress: str = "message",
        pacer: Pacer | None = None,
        channel_interval: float = 1.0,
        streaming: bool = True,
        feedback: bool = True,
        suggested_prompts: list[dict[str, str]] | None = None,
        timeout: float = 30.0,
    ) -> None:
        # No retry handlers: slack_sdk's default one sends a request again after a
        # connection error, which posts a message twice when the first one was carried out
        # and only its answer was lost. The gateway decides what to repeat (gateway/live.py).
        self.client = AsyncWebClient(token=bot_token, base_url=api_url, retry_handlers=[],
                                     timeout=int(timeout) if timeout >= 1 else 1)
        self._bot_token = bot_token
        #: The workspace's file hosts (and the API's own, for a stand-in of it).
        self.file_hosts = SLACK_FILE_HOSTS | {host_of(api_url)}
        # Without a signing secret only Socket Mode is open: handle() refuses HTTP requests.
        self.signing_secret = signing_secret
        # Named: without a name, bolt names the app after its caller's file from
        # inspect.stack(), which reads the source of every file on the stack (~0.4 MB kept
        # in linecache for the life of the process).
        self.app = AsyncApp(
            name="hermes-gateway", client=self.client,
            signing_secret=signing_secret or "socket-mode-only",
            process_before_response=True,
            request_verification_enabled=signing_secret is not None)
        self.app_token = app_token
        self.ingest = ingest
        self.interact = interact
        self.progress_mode = progress
        self.pacer = pacer or Pacer()
        self.channel_interval = channel_interval
        self.streaming = streaming
        self.feedback = feedback
        self.suggested_prompts = suggested_prompts or []
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self._no_stream: set[str] = set()
        self._no_status: set[str] = set()
        self._reacted: set[str] = set()
        self._titled: dict[str, None] = {}
        self._socket: Any = None
        self.app.event("app_mention")(self._on_mention)
        self.app.event("message")(self._on_message)
        self.app.event("assistant_thread_started")(self._on_thread_started)
        self.app.event("assistant_thread_context_changed")(self._on_context_changed)
        self.app.action(re.compile(r"^hermes_"))(self._on_action)
        self.app.error(self._on_error)

    # --- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        auth = await self.client.auth_test()
        self.bot_user_id = auth.get("user_id")
        self.bot_id = auth.get("bot_id")
        if self.app_token:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            self._socket = AsyncSocketModeHandler(self.app, self.app_token)
            await self._socket.connect_async()
            log.info("slack socket mode connected")

    async def stop(self) -> None:
        if self._socket is not None:
            await self._socket.close_async()

    async def handle(self, request: web.Request) -> web.Response:
        """``POST /slack/events``: signature checked by bolt, then dispatched."""
        if self.signing_secret is None:
            return web.json_response(
                {"error": "the Events API over HTTP needs SLACK_SIGNING_SECRET"}, status=401)
        raw = await request.read()
        if len(raw) > 1_000_000:
            return web.json_response({"error": "body too large"}, status=413)
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            return web.json_response({"error": "the body must be UTF-8"}, status=400)
        # bolt reads the body before it checks the signature, and fails on one that is
        # not an object (``null``, a list): check both first, in that order.
        if not _signed(self.signing_secret, body, request.headers):
            return web.json_response({"error": "invalid or stale Slack signature"},
                                     status=401)
        try:
            parsed = parse_body(body, request.content_type)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return web.json_response({"error": "the body must be a JSON object, or a form "
                                      "whose payload field is one"}, status=400)
        try:
            bolt_request = await to_bolt_request(request)
            bolt_response = await self.app.async_dispatch(bolt_request)
        except Exception as exc:
            # bolt catches its listeners' errors (see _on_error); what escapes is bolt
            # itself failing to read a payload Slack would not send (even its error
            # handler's arguments are read from it).
            log.warning("slack payload not understood: %s: %s", type(exc).__name__, exc)
            return web.json_response({"error": "the Slack payload has an unexpected shape"},
                                     status=400)
        if bolt_response.status >= 500:
            # Our listener could not queue the message (store down): Slack will retry.
            return web.json_response({"error": "temporarily unavailable, retry later"},
                                     status=503, headers={"Retry-After": "5"})
        return await to_aiohttp_response(bolt_response)

    # --- inbound -------------------------------------------------------------------------
    async def _on_mention(self, event: dict[str, Any], body: dict[str, Any],
                          context: dict[str, Any]) -> None:
        msg = self.to_inbound(event, body)
        if msg is not None:
            context[_QUEUEING] = True
            await self.ingest(msg)

    async def _on_message(self, event: dict[str, Any], body: dict[str, Any],
                          context: dict[str, Any]) -> None:
        if event.get("channel_type") != "im" and event.get("subtype") != "message_changed":
            return  # channel messages reach us as app_mention when they address us
        msg = self.to_inbound(event, body)
        if msg is not None:
            context[_QUEUEING] = True
            await self.ingest(msg)

    async def _on_thread_started(self, event: dict[str, Any]) -> None:
        """A person opened an assistant thread: offer the suggested prompts."""
        thread = event.get("assistant_thread") or {}
        if self.suggested_prompts and thread.get("channel_id") and thread.get("thread_ts"):
            await self._quietly("assistant_threads_setSuggestedPrompts",
                                channel_id=thread["channel_id"],
                                thread_ts=thread["thread_ts"],
                                prompts=self.suggested_prompts[:4])

    async def _on_context_changed(self) -> None:
        """The person moved to another channel with the thread open: nothing to do."""

    def to_inbound(self, event: dict[str, Any], body: dict[str, Any]) -> InboundMessage | None:
        """The normalised message of an app_mention or message event, or None to ignore.
        An edit (``message_changed``) is the edited message, marked as an edit of it."""
        if event.get("subtype") == "message_changed":
            return self._edited(event, body)
        if event.get("bot_id") or event.get("subtype") in _IGNORED_SUBTYPES:
            return None
        user = event.get("user")
        if not user or user == self.bot_user_id:
            return None
        team = body.get("team_id") or event.get("team") or "T"
        channel = event["channel"]
        ts = event["ts"]
        text = event.get("text", "")
        if self.bot_user_id:
            text = text.replace(f"<@{self.bot_user_id}>", "")
        text = re.sub(r"\s+", " ", text).strip()
        files = slack_attachments(event.get("files"))
        direct = event.get("channel_type") == "im" or str(channel).startswith("D")
        thread = event.get("thread_ts")
        # The recipient of a stream (Slack asks for both, even in a DM).
        who = {"user": user, "team": team}
        if direct:
            # A thread of a DM is a conversation of its own (an assistant thread: each is a
            # new chat); the DM's top level is one conversation.
            cid = f"slack:{team}:{channel}:{thread}" if thread else f"slack:{team}:{channel}"
            target = {"channel": channel, "thread_ts": thread, "message_ts": ts, **who}
            if thread:
                target["title"] = text[:80]
        else:
            cid = f"slack:{team}:{channel}:{thread or ts}"
            target = {"channel": channel, "thread_ts": thread or ts, "message_ts": ts, **who}
        return InboundMessage(
            channel="slack", conversation_id=cid, user_id=user,
            text=text or ("" if files else "(empty)"), is_direct=direct, mentions_bot=True,
            platform_message_id=f"{team}:{channel}:{ts}", reply_target=target,
            space_id=team, room_id=channel, attachments=files)

    def download(self, attachment: Attachment) -> AsyncIterator[bytes]:
        """A shared file's bytes: its url_private_download with the bot token (the app's
        files:read scope), from the workspace's own file host only."""
        return stream(attachment.ref, hosts=self.file_hosts, what="Slack",
                      headers={"Authorization": f"Bearer {self._bot_token}"})

    async def _on_action(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any],
                         action: dict[str, Any], context: dict[str, Any]) -> None:
        await ack()  # within 3 s, before any work
        if self.interact is None:
            return
        context[_QUEUEING] = True
        press = self.to_interaction(body, action)
        reply = await self.interact(press)
        message = body.get("message") or {}
        if reply.refused:
            await self.post_ephemeral(press.room_id, press.user_id, reply.text,
                                      thread_ts=message.get("thread_ts"))
        if reply.chosen is not None and press.prompt is not None:
            await self.replace_prompt(press.prompt, f"{press.prompt_text}\n→ "
                                      f"{slack_escape(reply.chosen)} ({press.user_name})")

    def _edited(self, event: dict[str, Any], body: dict[str, Any]) -> InboundMessage | None:
        """A ``message_changed`` event: the message as it is now, as an edit of itself."""
        inner = event.get("message") or {}
        if inner.get("bot_id") or inner.get("subtype") or not inner.get("ts"):
            return None
        if (event.get("previous_message") or {}).get("text") == inner.get("text"):
            return None  # unfurls, reactions: not an edit of the text
        msg = self.to_inbound({**inner, "channel": event.get("channel"),
                               "channel_type": event.get("channel_type")}, body)
        if msg is None:
            return None
        when = event.get("event_ts") or event.get("ts") or (inner.get("edited") or {}).get("ts")
        return msg.model_copy(update={
            "edit_of": msg.platform_message_id,
            "platform_message_id": f"{msg.platform_message_id}:edit:{when}"})

    def to_interaction(self, body: dict[str, Any], action: dict[str, Any]) -> Interaction:
        """The normalised press of a block_actions button (ours: hermes_*)."""
        user_id = str((body.get("user") or {}).get("id", ""))
        channel_id = str((body.get("channel") or {}).get("id", ""))
        team = str((body.get("team") or {}).get("id", "T"))
        message = body.get("message") or {}
        action_id = str(action.get("action_id", ""))
        thread = message.get("thread_ts") or message.get("ts")
        direct = channel_id.startswith("D")
        # Named as to_inbound names the conversation the prompt was posted in (a thread of
        # a DM is one of its own).
        cid = f"slack:{team}:{channel_id}" if direct else f"slack:{team}:{channel_id}:{thread}"
        if direct and message.get("thread_ts"):
            cid = f"slack:{team}:{channel_id}:{message['thread_ts']}"
        where: dict[str, Any] = {
            "channel": "slack", "user_id": user_id, "user_name": f"<@{user_id}>",
            "conversation_id": cid if channel_id and (direct or thread) else "",
            "reply_target": {"channel": channel_id, "thread_ts": thread},
            "space_id": team, "room_id": channel_id, "is_direct": direct,
            "prompt": {"channel": channel_id, "ts": message["ts"]} if message.get("ts")
            else None,
            "prompt_text": str(message.get("text", ""))}
        if action_id in (APPROVE, REJECT):
            return Interaction(kind="approval", target=str(action.get("value", "")),
                               approved=action_id == APPROVE, **where)
        if action_id == FEEDBACK:
            rating, _, delivery = str(action.get("value", "")).partition(":")
            return Interaction(kind="feedback", target=delivery, approved=rating == "good",
                               **where)
        if action_id == RERUN:
            return Interaction(kind="rerun", target=str(action.get("value", "")), **where)
        if action_id.startswith(f"{CHOICE}_"):
            index = action_id.removeprefix(f"{CHOICE}_")
            return Interaction(kind="choice",
                               target=str(action.get("block_id", "")).partition(":")[2],
                               choice=int(index) if index.isdigit() else None, **where)
        return Interaction(kind="unknown", **where)

    async def _on_error(self, error: Exception, request: AsyncBoltRequest
                        ) -> BoltResponse | None:
        """bolt's error handler. Failing to queue a message or a click (the store is down)
        keeps bolt's 500, which ``handle`` answers with a 503 so that Slack retries; any
        other failure is a payload Slack does not send ("event": null, a channel id
        with a ";"), refused with a 400 (a retry would fail the same way)."""
        if request.context.get(_QUEUEING) and not isinstance(error, ValueError):
            log.warning("slack event not queued: %s: %s", type(error).__name__, error)
            return None
        log.warning("slack payload not understood: %s: %s", type(error).__name__, error)
        return BoltResponse(status=400,
                            body={"error": "the Slack payload has an unexpected shape"})

    # --- outbound (the rest is SlackOutbound's) ---------------------------------------------
    async def replace_prompt(self, ref: dict[str, Any], text: str) -> None:
        """Replace a question's buttons with the chosen answer (``text`` is mrkdwn)."""
        await self.update(ref["channel"], ref["ts"], text,
                          blocks=[{"type": "section", "text": {"type": "mrkdwn",
                                                               "text": text[:2900]}}])

    async def show_decision(self, ref: dict[str, Any], message: OutboundMessage) -> None:
        from .approvals import slack_blocks, slack_decision_text

        await self.update(ref["channel"], ref["ts"], slack_decision_text(message),
                          blocks=slack_blocks(message))

    async def direct_target(self, user_id: str) -> dict[str, Any]:
        response = await self._call("conversations_open", {}, users=user_id)
        return {"channel": response["channel"]["id"], "user": user_id}

    async def post_ephemeral(self, channel: str, user: str, text: str,
                             thread_ts: str | None = None) -> None:
        """A message only ``user`` sees (e.g. "you can't approve this")."""
        await self._call("chat_postEphemeral", {f"slack:{channel}": self.channel_interval},
                         channel=channel, user=user, text=text, thread_ts=thread_ts)

    async def update(self, channel: str, ts: str, text: str,
                     blocks: list[dict[str, Any]] | None = None) -> None:
        """Replace a message (e.g. an approval prompt once decided)."""
        await self._call("chat_update", {f"slack:update:{ts}": 0.0}, channel=channel, ts=ts,
                         text=text, blocks=blocks or [])

    async def attach(self, target: dict[str, Any], task_id: str, file: FileToShow) -> None:
        # files.getUploadURLExternal, the upload, files.completeUploadExternal: one share
        # in the task's thread.
        await self._call("files_upload_v2", {f"slack:{target['channel']}": 1.0},
                         channel=target["channel"], thread_ts=target.get("thread_ts"),
                         file=file.data, filename=file.name, title=file.name)

    async def status(self, target: dict[str, Any], line: str | None) -> None:
        thread = target.get("thread_ts")
        if line is not None and thread and target.get("title") and len(self._titled) < \
                _TITLED_LIMIT and thread not in self._titled:
            # An assistant thread is named after its first question (once per process).
            self._titled[thread] = None
            await self._quietly("assistant_threads_setTitle", channel_id=target["channel"],
                                thread_ts=thread, title=str(target["title"]))
        await super().status(target, line)


def _signed(secret: str, body: str, headers: Any) -> bool:
    """Whether Slack signed ``body`` within the last five minutes (slack_sdk's check)."""
    try:
        return SignatureVerifier(secret).is_valid(
            body, headers.get("X-Slack-Request-Timestamp", ""),
            headers.get("X-Slack-Signature", ""))
    except ValueError:  # a timestamp that is not a number
        return False
