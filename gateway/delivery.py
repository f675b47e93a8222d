"""Delivering replies: retried with backoff through platform outages, never dropped
silently, never shown twice; what cannot be delivered goes to a dead-letter list with the
reason.

A chat platform's reply (``LiveChannel``) is posted part by part, each part tagged with its
delivery (``Tag``). Posting is the one step that is not idempotent: after a request whose
answer was lost (``DeliveryError.applied == "maybe"``) the part is looked for by its tag
before it is posted again, and where the platform cannot tell (Telegram), the second copy
says that it may repeat an earlier message. A ``Posting`` holds what was posted and the
part whose outcome is unknown; a live reply keeps it in the store (``gateway/live.py``), so
a replica that takes the reply over goes on from there. Other channels (webhooks, the API)
are sent whole, again on failure (their receivers dedupe by idempotency key).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from redis.asyncio import Redis

from adapters.base import Channel, OutboundMessage
from adapters.errors import DeliveryError
from adapters.live import LiveChannel, Tag
from agent_core import Event, EventType
from agent_core.ids import new_id
from agent_core.store.keys import Keys

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Sent:
    """A delivered reply and, when the channel says, where it was posted."""

    ref: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """How a delivery ended."""

    outcome: Literal["sent", "dead"]
    seconds: float
    attempts: int
    #: Why it was given up on (outcome "dead").
    reason: str = ""

    def event(self, message: OutboundMessage) -> Event:
        """The event of its task (REPLY_DELIVERED or REPLY_UNDELIVERABLE)."""
        kind = EventType.REPLY_DELIVERED if self.outcome == "sent" \
            else EventType.REPLY_UNDELIVERABLE
        return Event(kind, message.task_id or "", message.conversation_id, 0, {
            "channel": message.channel, "kind": message.kind,
            "seconds": round(self.seconds, 6), "attempts": self.attempts,
            **({"reason": self.reason[:500]} if self.reason else {})},
            task_id=message.task_id or "")


@dataclass(slots=True)
class Posting:
    """The parts of one reply posted so far (part -> ref), and the part whose post was
    sent but not answered (``unsure``); ``save`` keeps it (a live reply's record)."""

    delivery: str = field(default_factory=new_id)
    parts: dict[int, dict[str, Any]] = field(default_factory=dict)
    unsure: int | None = None
    save: Callable[[], Awaitable[None]] | None = None

    async def saved(self) -> None:
        if self.save is not None:
            await self.save()


class GaveUp(Exception):
    """A step failed for good (dead-lettered, or not retryable); ``error`` says why."""

    def __init__(self, error: DeliveryError | None, reason: str) -> None:
        super().__init__(reason)
        self.error = error


class Deliverer:
    """Sends OutboundMessages through their channel, retrying what is retryable."""

    def __init__(self, channels: dict[str, Channel], redis: Redis, prefix: str, *,
                 max_seconds: float = 600.0, base_delay: float = 1.0,
                 sleep: Sleep = asyncio.sleep,
                 counted: Callable[[str, str], None] | None = None,
                 on_done: Callable[[OutboundMessage, Done], None] | None = None) -> None:
        self.channels = channels
        self.redis = redis
        self._keys = Keys.of(redis, prefix)
        self.dead_letters = self._keys.dead_letters()
        self.max_seconds = max_seconds
        self.base_delay = base_delay
        self._sleep = sleep
        #: Told the channel and result of each attempt (sent, failed) and give-up (dead).
        self.counted = counted
        #: Told how each delivery ended: sent or dead-lettered, in how long, after how
        #: many attempts (the gateway turns it into the task's REPLY_* event).
        self.on_done = on_done
        #: Attempts so far of each delivery under way (by its message object).
        self._tries: dict[int, int] = {}

    async def deliver(self, message: OutboundMessage, posting: Posting | None = None
                      ) -> Sent | None:
        """Sent once delivered (with where, if the channel says); None if dead-lettered."""
        result = await self.deliver_or_reason(message, posting)
        return result if isinstance(result, Sent) else None

    async def deliver_or_reason(self, message: OutboundMessage,
                                posting: Posting | None = None, *,
                                max_seconds: float | None = None) -> Sent | str:
        """``deliver``, answering why when it gives up (the message is dead-lettered then).
        ``max_seconds``: how long retryable failures are retried (the deliverer's own by
        default)."""
        started = time.monotonic()
        deadline = started + (self.max_seconds if max_seconds is None else max_seconds)
        self._tries[id(message)] = 0
        try:
            channel = self.channels.get(message.channel)
            if channel is None:
                return await self._dead(message, f"channel {message.channel!r} is not "
                                                 "enabled", started)
            try:
                if isinstance(channel, LiveChannel):
                    sent = Sent(await self.post_all(channel, message, posting or Posting(),
                                                    deadline=deadline))
                else:
                    sent = Sent(await self.attempt(message, lambda: channel.send(message),
                                                   deadline=deadline))
            except GaveUp as exc:
                return await self._dead(message, str(exc), started)
            self._done(message, Done("sent", time.monotonic() - started, self._tried(message)))
            return sent
        finally:
            self._tries.pop(id(message), None)

    def _try(self, message: OutboundMessage) -> None:
        if id(message) in self._tries:
            self._tries[id(message)] += 1

    def _tried(self, message: OutboundMessage) -> int:
        return max(1, self._tries.get(id(message), 1))

    async def attempt(self, message: OutboundMessage, step: Callable[[], Awaitable[T]], *,
                      deadline: float | None = None) -> T:
        """``step`` until it succeeds, retrying what is retryable with backoff (Retry-After
        when given) for up to ``max_seconds``; GaveUp otherwise. For steps that may be
        repeated (idempotent ones, or ones known not to have been carried out)."""
        deadline = deadline or time.monotonic() + self.max_seconds
        attempt = 0
        while True:
            attempt += 1
            self._try(message)
            try:
                result = await step()
                self._count(message.channel, "sent")
                return result
            except DeliveryError as exc:
                self._count(message.channel, "failed")
                if not exc.retryable or time.monotonic() >= deadline:
                    raise GaveUp(exc, str(exc)) from exc
                await self._backoff(message, exc, attempt, deadline)
            except GaveUp:
                raise
            except Exception as exc:  # a bug in an adapter: dead-letter, never loop forever
                log.exception("delivery through %s crashed", message.channel)
                raise GaveUp(None, f"{type(exc).__name__}: {exc}") from exc

    async def _backoff(self, message: OutboundMessage, exc: DeliveryError, attempt: int,
                       deadline: float) -> None:
        delay = exc.retry_after if exc.retry_after is not None else min(
            60.0, self.base_delay * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
        log.warning("delivery to %s failed (%s); retry %d in %.1fs", message.channel, exc,
                    attempt, delay)
        await self._sleep(min(delay, max(0.0, deadline - time.monotonic())))

    # --- posting exactly once ----------------------------------------------------------------
    async def post_all(self, channel: LiveChannel, message: OutboundMessage,
                       posting: Posting, *, start: int = 0, deadline: float | None = None
                       ) -> dict[str, Any] | None:
        """Post the parts of ``message`` from ``start`` on that ``posting`` has not posted
        yet; the last part's ref. A reply sent again after a restart (``replaces``) edits
        the message it was posted in."""
        count = len(channel.split(message))
        before = message.edits(channel.ref_key)
        if before is not None and "edit" in channel.idempotent.get("final", frozenset()):
            tag = Tag(posting.delivery, count - 1)
            await self.attempt(message, lambda: channel.edit(before, message, count - 1,
                                                             tag=tag), deadline=deadline)
            return before
        ref: dict[str, Any] | None = None
        for part in range(start, count):
            ref = posting.parts.get(part) or await self._post_one(channel, message, posting,
                                                                  part, deadline)
        return ref

    async def _post_one(self, channel: LiveChannel, message: OutboundMessage,
                        posting: Posting, part: int, deadline: float | None = None
                        ) -> dict[str, Any]:
        tag = Tag(posting.delivery, part)
        repeat = False
        if posting.unsure == part:  # sent before, by us or a replica that died: was it?
            found, repeat = await self.look(channel, message.reply_target, tag)
            if found is not None:
                return await self._posted(posting, part, found)
        posting.unsure = part
        await posting.saved()  # before the request: a replica that takes over knows
        deadline = deadline or time.monotonic() + self.max_seconds
        attempt = 0
        while True:
            attempt += 1
            self._try(message)
            try:
                ref = await channel.post(message, part, tag=tag, repeat=repeat)
                self._count(message.channel, "sent")
                return await self._posted(posting, part, ref)
            except DeliveryError as exc:
                self._count(message.channel, "failed")
                if exc.applied == "maybe" and "post" not in channel.idempotent.get(
                        "final", frozenset()):
                    found, cannot_tell = await self.look(channel, message.reply_target, tag)
                    if found is not None:
                        return await self._posted(posting, part, found)
                    repeat = repeat or cannot_tell
                if not exc.retryable or time.monotonic() >= deadline:
                    raise GaveUp(exc, str(exc)) from exc
                await self._backoff(message, exc, attempt, deadline)

    async def look(self, channel: LiveChannel, target: dict[str, Any], tag: Tag, *,
                   known: list[dict[str, Any]] | None = None
                   ) -> tuple[dict[str, Any] | None, bool]:
        """(the ref of the message posted with ``tag``, or None; whether the platform could
        not tell, so that a copy cannot be ruled out)."""
        try:
            return await channel.find(target, tag, known=known), False
        except NotImplementedError:
            return None, True
        except DeliveryError as exc:  # no history scope, the API down: it cannot tell
            log.info("could not look for %s part %d: %s", tag.delivery, tag.part, exc)
            return None, True

    @staticmethod
    async def _posted(posting: Posting, part: int, ref: dict[str, Any]) -> dict[str, Any]:
        posting.parts[part] = ref
        posting.unsure = None
        await posting.saved()
        return ref

    # --- where replies went -------------------------------------------------------------
    async def remember(self, task_id: str, ref: dict[str, Any] | None, *, ttl: float) -> None:
        """Keep where a task's reply was posted (best effort: a store outage loses it)."""
        if not ref:
            return
        try:
            await self.redis.set(self._keys.delivered(task_id), json.dumps(ref), ex=int(ttl))
        except Exception as exc:
            log.info("could not record where %s's reply went: %s", task_id, exc)

    async def where(self, task_id: str) -> dict[str, Any] | None:
        """Where a task's reply was posted before, if that was recorded."""
        raw = await self.redis.get(self._keys.delivered(task_id))
        return dict(json.loads(raw)) if raw else None

    def _count(self, channel: str, result: str) -> None:
        if self.counted is not None:
            self.counted(channel, result)

    async def dead(self, message: OutboundMessage, reason: str) -> None:
        """Give up on ``message``: counted, logged and kept in the dead-letter list."""
        await self._dead(message, reason, time.monotonic())

    def _done(self, message: OutboundMessage, done: Done) -> None:
        if self.on_done is not None:
            try:
                self.on_done(message, done)
            except Exception:  # a listener's bug never undoes a delivery
                log.exception("a delivery listener failed")

    async def _dead(self, message: OutboundMessage, reason: str, started: float) -> str:
        self._count(message.channel, "dead")
        log.error("undeliverable %s reply for %s: %s", message.channel,
                  message.conversation_id, reason)
        self._done(message, Done("dead", time.monotonic() - started, self._tried(message),
                                 reason))
        entry = json.dumps({"id": new_id(16), "message": message.model_dump(mode="json"),
                            "reason": reason, "at": time.time()}, ensure_ascii=False)
        try:
            pipe = self.redis.pipeline(transaction=True)
            pipe.rpush(self.dead_letters, entry)
            pipe.ltrim(self.dead_letters, -10_000, -1)
            await pipe.execute()
        except Exception as exc:
            log.error("could not dead-letter the reply either: %s", exc)
        return reason
