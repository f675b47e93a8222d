"""Live replies: a chat reply shown while the agent works, then delivered exactly once.

One reply, one state machine (``ReplyRecord``, in the store): live (a draft, a stream, or
a message edited in place, and the status line) until the answer, then final. The gateway
owns it and decides every retry from what the channel says its steps are
(``adapters/live.py``): a step that may be repeated is repeated; a step that is not
idempotent and went unanswered is reconciled (the message looked for) before anything else
is sent; the step that carries the answer is an edit of a message whose ref the record
already holds wherever the surface has one. A replica that takes a task over finds the
record: a stream the dead one left open is ended and its message edited from then on, a
post whose answer was lost is looked for, and the answer is delivered once.

While the task runs, the text the model streams, its tool steps and a status line go out
at the channel's pace (``interval``): an update that fails is dropped (the next one shows
everything so far), never the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from adapters.base import OutboundMessage
from adapters.errors import DeliveryError
from adapters.live import LIVE_PART, Display, LiveChannel, Primitive, Step, StepStatus, Tag
from agent_core import Event, EventType

from .delivery import Deliverer, Sent
from .live_end import ReplyEnd
from .live_record import ReplyBook, ReplyRecord
from .progress import describe
from .queue import WorkItem

log = logging.getLogger(__name__)

THINKING = "is thinking…"
#: A draft is shown again this often while nothing changes (Telegram keeps one 30 s).
DRAFT_KEEPALIVE = 20.0


def status_of(event: Event) -> str | None:
    """What the agent is doing, as a status line ("is running sales_report…")."""
    p = event.payload
    match event.type:
        case EventType.TOOL_STARTED if p.get("tool") == "delegate":
            wanted = (p.get("arguments") or {}).get("capability", "another")
            return f"is asking a {wanted} agent…"
        case EventType.TOOL_STARTED:
            return f"is running {p.get('tool')}…"
        case EventType.TOOL_PROGRESS:
            return f"is running {p.get('tool')}: {p.get('note')}"[:120]
        case EventType.TOOL_FINISHED | EventType.TOOL_ERROR | EventType.MODEL_RETRY:
            return THINKING
        case EventType.HUMAN_CONFIRM_REQUIRED:
            return "is waiting for an approval…"
        case _:
            return None


class LiveReplies:
    """The replies this process shows live (an EventBus handler), and their records."""

    def __init__(self, *, book: ReplyBook, deliverer: Deliverer) -> None:
        self.book = book
        self.deliverer = deliverer
        self._by_task: dict[str, LiveReply] = {}
        self._by_item: dict[str, LiveReply] = {}

    async def begin(self, item: WorkItem, channel: LiveChannel) -> None:
        """The task of ``item`` starts (or resumes, or is taken over) in a chat. Its events
        are followed from the call on (before the first await), even while the record is
        read."""
        reply = LiveReply(self, channel, self._new(item, channel))
        self._by_task[item.task_id] = reply
        self._by_item[item.id] = reply
        stored = await self._record(item, channel)
        if stored is not None:
            stored.model = stored.model or reply.record.model
            reply.record = stored
        await reply.start(taken_over=stored is not None)

    def __call__(self, event: Event) -> None:
        """EventBus handler."""
        reply = self._by_task.get(event.task_id)
        if reply is not None:
            reply.on(event)

    async def pause(self, item: WorkItem) -> None:
        """The task stopped running here (ended, paused, or handed to another process):
        no more updates; the record stays for ``finish`` (here or on another replica)."""
        reply = self._by_task.pop(item.task_id, None)
        if reply is not None:
            await reply.halt()

    def forget(self, item: WorkItem) -> None:
        """Nothing more will be done with ``item``'s reply here."""
        self._by_item.pop(item.id, None)

    async def finish(self, item: WorkItem, channel: LiveChannel, message: OutboundMessage
                     ) -> Sent | None:
        """Deliver ``message`` as the end of ``item``'s reply, exactly once: None when it
        could not be delivered (dead-lettered)."""
        reply = self._by_item.pop(item.id, None)
        if reply is None:
            record = await self._record(item, channel)
            if record is None:
                record = self._new(item, channel)
            elif record.ref is not None:
                # Shown by another process (or before a restart): what its live message
                # holds is not known here, so the answer replaces it.
                record.dirty = True
            reply = LiveReply(self, channel, record)
        await reply.halt()
        return await reply.finish(message)

    async def close(self, item: WorkItem, channel: LiveChannel) -> None:
        """End ``item``'s reply without an answer (its task was superseded)."""
        reply = self._by_item.pop(item.id, None)
        if reply is None:
            record = await self._record(item, channel)
            if record is None or record.phase != "live":
                return
            reply = LiveReply(self, channel, record)
        await reply.halt()
        await reply.close()

    async def _record(self, item: WorkItem, channel: LiveChannel) -> ReplyRecord | None:
        return await self.book.load(item.id)

    @staticmethod
    def _new(item: WorkItem, channel: LiveChannel) -> ReplyRecord:
        msg = item.inbound
        return ReplyRecord(delivery=item.id, task_id=item.task_id,
                           conversation_id=msg.conversation_id, channel=msg.channel,
                           target=msg.reply_target, mode=channel.live_mode(msg.reply_target))


class LiveReply(ReplyEnd):
    """One reply while its task runs: what it shows, and the one writer of its updates;
    its end is ``ReplyEnd``'s."""

    def __init__(self, owner: LiveReplies, channel: LiveChannel, record: ReplyRecord) -> None:
        self.owner = owner
        self.channel = channel
        self.record = record
        self.display = Display()
        #: Stream mode: the text the stream holds, and text not appended yet.
        self.streamed = ""
        self.pending = ""
        #: Stream mode: no more text goes into the stream (its content is not known, or a
        #: retry started the answer over); the answer will replace it.
        self.frozen = False
        self.new_turn = False
        #: Text or a step has come (the first of them says how a stream shows its steps).
        self.started = False
        self.steps: dict[str, Step] = {}
        self.changed: dict[str, Step] = {}
        self.line: str | None = THINKING
        self.shown_line: str | None = None
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.flusher: asyncio.Task[None] | None = None
        #: No more updates: the flusher ends after the one in flight (never cancelled in
        #: the middle of a request, whose outcome would then be unknown).
        self.halting = asyncio.Event()
        #: When the live message was last updated, and what it showed then.
        self.last = 0.0
        self.last_shown: tuple[str, str, str] | None = None

    def safe(self, step: Primitive) -> bool:
        """Whether the channel says ``step`` may be repeated with the same effect in this
        reply's mode (else a request of it that went unanswered is reconciled first)."""
        return step in self.channel.idempotent.get(self.record.mode, frozenset())

    @property
    def tag(self) -> Tag:
        return Tag(self.record.delivery, LIVE_PART)

    async def save(self) -> None:
        await self.owner.book.save(self.record)

    # --- while the task runs -------------------------------------------------------------------
    async def start(self, *, taken_over: bool) -> None:
        record = self.record
        if record.phase != "live":
            return
        async with self.lock:
            if record.opening:  # an open went unanswered (this process or a dead one)
                found, _ = await self.owner.deliverer.look(
                    self.channel, record.target, self.tag)
                record.ref, record.opening = found, False
                await self.save()
            if taken_over and record.ref is not None and record.mode == "stream":
                # Another process streamed into it: end that stream, edit it from now on.
                with contextlib.suppress(DeliveryError):
                    await self.channel.stop_stream(record.ref, self._empty(), rest=None,
                                                   tag=self.tag)
                record.mode, record.dirty = "edit", True
                await self.save()
            if record.ref is None and self.channel.opens_at_start(record.mode):
                shown = (self.display.text, self.display.line, self.display.plan)
                if await self._open():
                    self.last_shown = shown  # what it showed (more may have come since)
            await self._status()
        self.flusher = asyncio.create_task(self._flush_loop(),
                                           name=f"live-{record.delivery}")

    def on(self, event: Event) -> None:
        """One event of the task: text, steps and status to show."""
        p = event.payload
        match event.type:
            case EventType.AGENT_STARTED if p.get("model"):
                self.record.model = str(p["model"])
            case EventType.MODEL_FALLBACK:
                self.record.model = str(p.get("to") or self.record.model)
                self._restart_text()
            case EventType.MODEL_RETRY:
                self._restart_text()
            case EventType.CONTEXT_UPDATED:
                self.new_turn = True  # a model call starts: its text is the new text
            case EventType.MODEL_DELTA if p.get("text"):
                self.started = True
                text = str(p["text"])
                if self.new_turn:
                    self.new_turn = False
                    if self.record.mode != "stream":
                        self.display.text = ""
                    elif self.streamed or self.pending:
                        # A stream keeps what an earlier turn wrote ("Let me check."): the
                        # new turn starts a paragraph (the answer replaces both at the end).
                        text = "\n\n" + text
                self.display.text += text
                if not self.frozen:
                    self.pending += text
            case EventType.PLAN_UPDATED if p.get("plan"):
                self.display.plan = str(p["plan"]).strip().splitlines()[0][:256]
                self.display.plan_new = True
            case EventType.TOOL_STARTED | EventType.TOOL_FINISHED | EventType.TOOL_ERROR:
                call = str(p.get("call_id") or p.get("tool"))
                done: StepStatus = "in_progress" if event.type == EventType.TOOL_STARTED \
                    else "complete" if event.type == EventType.TOOL_FINISHED else "error"
                step = Step(call, str(p.get("tool")), done)
                self.steps[call] = self.changed[call] = step
                if not self.started:
                    self.started = self.display.began_with_steps = True
        line = describe(event)
        if line is not None:
            self.display.line = line
        status = status_of(event)
        if status is not None:
            self.line = status
        self.wake.set()

    def _restart_text(self) -> None:
        self.display.text = ""
        self.pending = ""
        if self.record.mode == "stream" and self.streamed:
            self.frozen = True
            self.record.dirty = True

    async def halt(self) -> None:
        """Stop the updates (the one in flight finishes first)."""
        self.halting.set()
        self.wake.set()
        if self.flusher is not None:
            await asyncio.wait([self.flusher])
            self.flusher = None

    async def _flush_loop(self) -> None:
        interval = self.channel.interval(self.record.mode)
        while True:
            if self.record.mode == "draft":
                # A draft lasts 30 s on the screen: shown again while a tool runs long.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), DRAFT_KEEPALIVE)
                if not self.wake.is_set():
                    self.last_shown = None
                    self.wake.set()
            await self.wake.wait()
            wait = self.last + interval - time.monotonic()
            if wait > 0 and not self.halting.is_set():
                with contextlib.suppress(TimeoutError):  # cut short only to halt
                    await asyncio.wait_for(self.halting.wait(), wait)
            if self.halting.is_set():
                return
            self.wake.clear()
            async with self.lock:
                try:
                    # The pace counts from the last update that showed text: the first text
                    # goes out as soon as it comes.
                    if await self._push() and self.display.text:
                        self.last = time.monotonic()
                except Exception as exc:  # an update is decoration: never the task's end
                    log.info("live update of %s failed: %s", self.record.delivery, exc)

    async def _push(self) -> bool:
        """Bring the live message up to date; whether a request for it was made."""
        record = self.record
        await self._status()
        if record.mode == "final" or record.phase != "live":
            return False
        delta, steps = self.pending, list(self.changed.values())
        plan = self.display.plan if self.display.plan_new else None
        shown = (self.display.text, self.display.line, self.display.plan)
        quiet = not delta and not steps and not self.display.plan_new
        if (record.mode == "stream" and quiet) or \
                (record.mode != "stream" and shown == self.last_shown):
            return False
        self.display.delta, self.display.steps = delta, list(self.steps.values())
        self.display.steps_new = steps
        if record.ref is None and record.mode != "draft":
            if await self._open():
                self._sent(delta, steps, plan)
                self.last_shown = shown
            return True
        try:
            await self.channel.append(record.ref, record.target, record.mode, self.display,
                                      tag=self.tag)
        except DeliveryError as exc:
            if record.mode == "stream" and not exc.retryable and record.ref is not None:
                # The stream ended (Slack ends one after about five minutes): the message
                # is edited in place from now on, and the answer replaces what it holds.
                with contextlib.suppress(DeliveryError):
                    await self.channel.stop_stream(record.ref, self._empty(), rest=None,
                                                   tag=self.tag)
                record.mode, record.dirty = "edit", True
                self.last_shown = None
                await self.save()
            elif exc.applied == "maybe" and not self.safe("append"):
                # Whether the text went in is not known (an append to a stream adds to it):
                # no more text goes into it (its steps do), and the answer will replace
                # what it shows. A repeatable append is simply made again by the next one.
                self.frozen, record.dirty = True, True
                self.pending = ""
                await self.save()
            log.info("live update of %s dropped: %s", record.delivery, exc)
            return True
        self._sent(delta, steps, plan)
        self.last_shown = shown
        return True

    def _sent(self, delta: str, steps: list[Step], plan: str | None) -> None:
        """What went out is no longer pending; what came while it went still is."""
        if plan is not None and self.display.plan == plan:
            self.display.plan_new = False
        self.streamed += delta
        self.pending = self.pending[len(delta):]
        for step in steps:
            if self.changed.get(step.id) is step:
                del self.changed[step.id]

    async def _open(self) -> bool:
        """Open the live message (a stream, or the message to edit); False when it could
        not be (tried again with the next update, or, for a stream the platform refuses
        here, as an edited message)."""
        record = self.record
        self.display.delta, self.display.steps = self.pending, list(self.steps.values())
        record.opening = True
        await self.save()  # before the request: whoever finishes the reply looks for it
        try:
            record.ref = await self.channel.open(record.target, record.mode, self.display,
                                                 tag=self.tag)
        except DeliveryError as exc:
            if exc.applied == "maybe" and not self.safe("open"):
                record.ref, _ = await self.owner.deliverer.look(self.channel, record.target,
                                                                self.tag)
            elif not exc.retryable and record.mode == "stream":
                log.info("no stream in %s (%s): a message edited in place instead",
                         record.target.get("channel"), exc)
                self.channel.no_stream_in(str(record.target.get("channel")))
                record.mode = "edit"
            else:
                log.info("could not open the live reply %s: %s", record.delivery, exc)
        record.opening = False
        await self.save()
        return record.ref is not None

    async def _status(self) -> None:
        if self.line == self.shown_line:
            return
        self.shown_line = self.line
        try:
            await self.channel.status(self.record.target, self.line)
        except (DeliveryError, NotImplementedError) as exc:
            log.debug("status of %s not shown: %s", self.record.delivery, exc)

    def __repr__(self) -> str:
        return f"LiveReply({self.record.delivery!r}, {self.record.mode})"

