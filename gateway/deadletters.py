"""Dead letters: the replies the Deliverer gave up on (``Keys.dead_letters``, a list of
``{"id", "message", "reason", "at"}``), listed newest first, redelivered or discarded.

An entry is taken out of the list before anything is done with it (one LREM of its exact
text): two operators pressing Redeliver at once deliver it once, and the second is told it
is gone. A redelivery that fails again is dead-lettered again, with the new reason. An
entry written before entries had ids is known by a hash of its text.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis

from adapters.base import OutboundMessage
from agent_core.store import as_text, store_boundary

from .delivery import Deliverer

#: Entries read per step while looking for one by id (newest first).
_CHUNK = 200
#: How long a redelivery retries what is retryable before it is dead-lettered again (the
#: operator waits for the answer).
REDELIVER_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class Letter:
    """One dead letter, as stored."""

    id: str
    raw: str
    entry: dict[str, Any]

    def view(self) -> dict[str, Any]:
        """What the API shows: who it was for, what it said, why it failed, when."""
        message = self.entry.get("message") or {}
        return {"id": self.id, "reason": self.entry.get("reason"), "at": self.entry.get("at"),
                "channel": message.get("channel"),
                "conversation_id": message.get("conversation_id"),
                "task_id": message.get("task_id") or None, "kind": message.get("kind"),
                "text": str(message.get("text") or "")[:4000]}


@dataclass(frozen=True, slots=True)
class Redelivery:
    """What a redelivery did."""

    outcome: Literal["sent", "dead"]
    letter: Letter
    #: Why it failed again (outcome "dead").
    reason: str = ""


def _parse(raw: Any) -> Letter:
    text = as_text(raw)
    entry = json.loads(text)
    letter_id = entry.get("id") or hashlib.sha256(text.encode()).hexdigest()[:16]
    return Letter(str(letter_id), text, entry)


@store_boundary
class DeadLetters:
    """The dead-letter list of one deployment."""

    def __init__(self, redis: Redis, deliverer: Deliverer) -> None:
        self.redis = redis
        self.deliverer = deliverer
        self.key = deliverer.dead_letters

    async def count(self) -> int:
        """How many there are."""
        return int(await self.redis.llen(self.key))

    async def page(self, limit: int) -> tuple[list[Letter], int]:
        """The newest ``limit`` (newest first) and how many there are, read at one moment
        (a letter added in between would make a count the list does not show)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.lrange(self.key, -limit, -1)
        pipe.llen(self.key)
        rows, total = await pipe.execute()
        return [_parse(r) for r in reversed(rows)], int(total)

    async def find(self, letter_id: str) -> Letter | None:
        """The entry with this id, or None."""
        total = await self.count()
        end = total - 1
        while end >= 0:
            start = max(0, end - _CHUNK + 1)
            for raw in reversed(await self.redis.lrange(self.key, start, end)):
                letter = _parse(raw)
                if letter.id == letter_id:
                    return letter
            end = start - 1
        return None

    async def take(self, letter_id: str) -> Letter | None:
        """Remove the entry and return it; None if it is not (or no longer) there."""
        letter = await self.find(letter_id)
        if letter is None or not await self.redis.lrem(self.key, 1, letter.raw):
            return None
        return letter

    async def redeliver(self, letter_id: str) -> Redelivery | None:
        """Take the entry and send its message again; None if it is gone. Once taken, the
        delivery runs to its end even if the caller goes away (it would be lost else)."""
        letter = await self.take(letter_id)
        if letter is None:
            return None
        message = OutboundMessage.model_validate(letter.entry.get("message") or {})

        async def send() -> Redelivery:
            result = await self.deliverer.deliver_or_reason(message,
                                                           max_seconds=REDELIVER_SECONDS)
            if isinstance(result, str):  # dead-lettered again, with this reason
                return Redelivery("dead", letter, result)
            return Redelivery("sent", letter)

        return await asyncio.shield(asyncio.ensure_future(send()))
