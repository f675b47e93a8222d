"""Router: the one path every inbound message takes, whatever the channel.

dedupe (the channel and the platform's delivery identity) → access policy → the rate limit
of group messages (HERMES_RATE_LIMIT) → chat commands → durable queue (before the platform
is acknowledged) → a worker. Replies to refused users and to commands go out at once;
everything else is answered by the worker that runs the task. ``Router.ingest`` is the
``Ingest`` every adapter is given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from adapters.base import InboundMessage, Routed
from agent_core import tracing
from agent_core.lifecycle import WorkKind
from agent_core.store.keys import check_conversation_id
from agent_core.task import queued_json

from .access import AccessPolicy
from .commands import Commands
from .delivery import Deliverer
from .edits import Edits, identity
from .inbox import SENT_FILES, claimed
from .queue import WorkItem, WorkQueue
from .ratelimit import RateLimit
from .settings import GatewaySettings

log = logging.getLogger(__name__)

REFUSAL = ("Sorry, I can't help you here: you are not on this bot's access list. "
           "Ask an administrator if you think you should be.")


class Router:
    """Ingests normalised messages from every adapter."""

    def __init__(self, *, queue: WorkQueue, policy: AccessPolicy, deliverer: Deliverer,
                 commands: Commands, settings: GatewaySettings,
                 counted: Callable[[InboundMessage, Routed], None] | None = None,
                 rate: RateLimit | None = None) -> None:
        self.queue = queue
        #: How many group messages a person may send (None: no limit).
        self.rate = rate
        #: Told what became of each message (the metrics).
        self.counted = counted
        self.policy = policy
        self.deliverer = deliverer
        self.commands = commands
        self.settings = settings
        #: Routes edits of messages (None: edits are ignored).
        self.edits: Edits | None = None

    def follow_edits(self, edits: Edits) -> None:
        """Route edits of messages through ``edits`` (which routes what it lets through
        back here, as new messages)."""
        self.edits = edits
        edits.ingest = self.ingest

    async def ingest(self, msg: InboundMessage, *, task_id: str | None = None,
                     start_here: bool = False) -> Routed:
        """Route one message; returns once it is durably queued (or answered). ``task_id``:
        the id its task will have (one made here by default); ``start_here``: the caller
        waits for the answer in this process, so a free worker here starts it at once
        (``WorkQueue.ingest``)."""
        # Also the trace's id, in logs and events; in the conversation's shard (keys.py).
        task_id = task_id or self.queue.new_task_id(msg.conversation_id)
        with tracing.span("inbound", {"hermes.channel": msg.channel,
                                      "hermes.conversation_id": msg.conversation_id},
                          trace_id=task_id, kind="server") as span:
            routed = await self._route(msg, dedupe_key(msg), task_id, start_here)
            span.set_attribute("hermes.routed", routed.status)
            if routed.task_id:
                span.set_attribute("hermes.task_id", routed.task_id)
        if self.counted is not None:
            self.counted(msg, routed)
        # One line per inbound message at INFO (never its text: it may hold anything).
        log.info("inbound channel=%s conversation=%s %s%s", msg.channel, msg.conversation_id,
                 routed.status, f" task={routed.task_id}" if routed.task_id else
                 f" ({routed.reason})" if routed.reason else "")
        return routed

    async def _route(self, msg: InboundMessage, dedupe_key: str | None, task_id: str,
                     start_here: bool) -> Routed:
        check_conversation_id(msg.conversation_id)
        decision = self.policy.check(msg)
        if decision.verdict == "ignore":
            log.debug("ignored message in %s: %s", msg.conversation_id, decision.reason)
            return Routed("ignored", reason=decision.reason)
        if decision.verdict == "refuse":
            if dedupe_key is None or await self.queue.first_time(dedupe_key,
                                                                 msg.conversation_id):
                await self._refuse_once(msg)
            return Routed("refused", reason=decision.reason)
        if self.rate is not None:
            verdict, ends = await self.rate.admit(msg)
            if verdict != "ok":
                if verdict == "notice":  # one polite notice, then silence until `ends`
                    await self.deliverer.deliver(msg.reply(self.rate.notice(ends), "notice"))
                return Routed("refused", reason="rate limited")

        if msg.edit_of is not None:
            if self.edits is None:
                return Routed("ignored", reason="edits are not followed here")
            return await self.edits.route(msg, dedupe_key)

        command = self.commands.parse(msg.text)
        kind: WorkKind = "message"
        if command == "workflow" and self.commands.workflows:
            kind, command = "workflow", None  # a task of its own: queued, answered later
        if command is not None:
            if dedupe_key is not None and not await self.queue.first_time(
                    dedupe_key, msg.conversation_id):
                return Routed("duplicate")
            text = await self.commands.run(command, msg)
            await self.deliverer.deliver(msg.reply(text, "notice"))
            return Routed("command", reason=command, reply=text)

        item = WorkItem(kind=kind, inbound=msg, task_id=task_id,
                        traceparent=tracing.traceparent())
        placeholder = queued_json(
            task_id=task_id, conversation_id=msg.conversation_id, user_id=msg.user_id,
            instruction=msg.text, extra={"channel": msg.channel, **(
                {SENT_FILES: claimed(msg.attachments)} if msg.attachments else {})})
        mode = self.settings.hermes_busy_mode
        status = await self.queue.ingest(
            item, dedupe_key=dedupe_key, mode=mode, placeholder=placeholder,
            start_here=start_here,
            message_key=identity(msg) if msg.message_key else None)
        if status == "duplicate":
            return Routed("duplicate")
        if status == "taken":
            return Routed("queued", task_id, started_here=True)
        return Routed(status, task_id)

    async def enqueue_approval(self, msg: InboundMessage, task_id: str,
                               decision: dict[str, object]) -> None:
        """Queue a human's decision on a paused task behind the conversation's other work."""
        item = WorkItem(kind="approval", inbound=msg, task_id=task_id,
                        approval=dict(decision))
        await self.queue.ingest(item, dedupe_key=None)

    async def _refuse_once(self, msg: InboundMessage) -> None:
        # One polite refusal per user and channel a day; then silence.
        if await self.queue.first_time(f"refused:{msg.channel}:{msg.user_id}"):
            await self.deliverer.deliver(msg.reply(REFUSAL, "notice"))


def dedupe_key(msg: InboundMessage) -> str | None:
    """The key a second delivery of the same message would have (None: no dedupe)."""
    if msg.platform_message_id is None:
        return None
    return f"{msg.channel}:{msg.platform_message_id}"
