"""The state of one reply shown live, kept in the store so that any replica can finish it.

One record per work item (its id is the reply's delivery id): how the reply is shown
(``LiveMode``), the live message (a stream or an edited message) and whether a request to
open one went unanswered, what it shows is known exactly or not (``dirty``), the parts of
the final answer posted and the one whose post went unanswered, and whether the reply is
still live, final (delivered) or closed (abandoned: its task was interrupted).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

from pydantic import BaseModel, Field
from redis.asyncio import Redis

from adapters.live import LiveMode
from agent_core.store import Keys, store_boundary

log = logging.getLogger(__name__)

ReplyPhase = Literal["live", "final", "closed"]


class ReplyRecord(BaseModel):
    """One reply's state machine: live (draft or stream) -> final, or closed."""

    delivery: str
    task_id: str
    conversation_id: str
    channel: str
    target: dict[str, Any] = Field(default_factory=dict)
    mode: LiveMode = "final"
    phase: ReplyPhase = "live"
    #: The live message (a stream, or the message edited in place).
    ref: dict[str, Any] | None = None
    #: A request to open the live message was sent and not answered.
    opening: bool = False
    #: What the live message shows is not known exactly (an append went unanswered, a
    #: retry started the text over, another process streamed into it): the answer replaces
    #: it with an edit rather than adding the rest to it.
    dirty: bool = False
    #: The final answer's parts posted (part -> ref) and a part whose post went unanswered.
    parts: dict[int, dict[str, Any]] = Field(default_factory=dict)
    unsure: int | None = None
    #: The model that wrote the answer (for feedback counted by model).
    model: str = ""
    updated_at: float = Field(default_factory=time.time)


@store_boundary
class ReplyBook:
    """Reply records in the store (``Keys.reply``), kept for the task retention."""

    def __init__(self, redis: Redis, keys: Keys, *, ttl: float) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl = max(60, int(ttl))

    async def load(self, delivery: str) -> ReplyRecord | None:
        raw = await self.redis.get(self.keys.reply(delivery))
        return ReplyRecord.model_validate_json(raw) if raw else None

    async def save(self, record: ReplyRecord) -> None:
        record.updated_at = time.time()
        await self.redis.set(self.keys.reply(record.delivery), record.model_dump_json(),
                             ex=self.ttl)
