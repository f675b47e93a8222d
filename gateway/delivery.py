"""Delivering replies: retried with backoff through platform outages, never dropped
silently; what cannot be delivered goes to a dead-letter list with the reason."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis

from adapters.base import Channel, OutboundMessage
from adapters.errors import DeliveryError
from agent_core import Event, EventType
from agent_core.ids import new_id
from agent_core.store.keys import Keys

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


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


@dataclass(frozen=True, slots=True)
class Sent:
    """A delivered reply and, when the channel says, where it was posted."""

    ref: dict[str, Any] | None = None


class Deliverer:
    """Sends OutboundMessages through their channel, retrying what is retryable."""

    def __init__(self, channels: dict[str, Channel], redis: Redis, prefix: str, *,
                 max_seconds: float = 600.0, base_delay: float = 1.0,
                 sleep: Sleep = asyncio.sleep,
                 counted: Callable[[str, str], None] | None = None,
                 on_done: Callable[[OutboundMessage, Done], None] | None = None) -> None:
        self.channels = channels
        self.redis = redis
        self._keys = Keys(prefix)
        self.dead_letters = self._keys.dead_letters()
        self.max_seconds = max_seconds
        self.base_delay = base_delay
        self._sleep = sleep
        #: Told the channel and result of each attempt (sent, failed) and give-up (dead).
        self.counted = counted
        #: Told how each delivery ended: sent or dead-lettered, in how long, after how
        #: many attempts (the gateway turns it into the task's REPLY_* event).
        self.on_done = on_done

    async def deliver(self, message: OutboundMessage) -> Sent | None:
        """Sent once delivered (with where, if the channel says); None if dead-lettered."""
        result = await self.attempt(message)
        return result if isinstance(result, Sent) else None

    async def attempt(self, message: OutboundMessage, *, max_seconds: float | None = None
                      ) -> Sent | str:
        """``deliver``, answering why when it gives up (the message is dead-lettered then).
        ``max_seconds``: how long retryable failures are retried (the deliverer's own by
        default)."""
        started = time.monotonic()
        channel = self.channels.get(message.channel)
        if channel is None:
            return await self._dead(message, f"channel {message.channel!r} is not enabled",
                                    started, 0)
        deadline = started + (self.max_seconds if max_seconds is None else max_seconds)
        attempt = 0
        while True:
            attempt += 1
            try:
                sent = Sent(await channel.send(message))
                self._count(message.channel, "sent")
                self._done(message, Done("sent", time.monotonic() - started, attempt))
                return sent
            except DeliveryError as exc:
                self._count(message.channel, "failed")
                if not exc.retryable or time.monotonic() >= deadline:
                    return await self._dead(message, str(exc), started, attempt)
                delay = exc.retry_after if exc.retry_after is not None else min(
                    60.0, self.base_delay * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
                log.warning("delivery to %s failed (%s); retry %d in %.1fs", message.channel,
                            exc, attempt, delay)
            except Exception as exc:  # a bug in an adapter: dead-letter, never loop forever
                log.exception("delivery through %s crashed", message.channel)
                return await self._dead(message, f"{type(exc).__name__}: {exc}", started,
                                        attempt)
            await self._sleep(min(delay, max(0.0, deadline - time.monotonic())))

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

    def _done(self, message: OutboundMessage, done: Done) -> None:
        if self.on_done is not None:
            try:
                self.on_done(message, done)
            except Exception:  # a listener's bug never undoes a delivery
                log.exception("a delivery listener failed")

    async def _dead(self, message: OutboundMessage, reason: str, started: float,
                    attempts: int) -> str:
        self._count(message.channel, "dead")
        log.error("undeliverable %s reply for %s: %s", message.channel,
                  message.conversation_id, reason)
        self._done(message, Done("dead", time.monotonic() - started, attempts, reason))
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
