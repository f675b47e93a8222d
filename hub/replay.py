"""Replay: everything that passed through the hub under one correlation id, in order.

Requests, tool calls, answers, dead letters and repaired JSON are read back from their streams (a
scan: JetStream does not index headers) and ordered by when the server stored them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from .bus import CORRELATION, SUBJECTS, Bus


@dataclass(frozen=True, slots=True)
class Hop:
    """One message of a correlation id's history."""

    stored_at: dt.datetime
    stream: str
    subject: str
    message: dict[str, Any]


async def replay(bus: Bus, correlation_id: str, *, wait: float = 5.0) -> list[Hop]:
    """The messages carrying ``correlation_id``, oldest first."""
    hops: list[Hop] = []
    for stream in SUBJECTS:
        hops += await _scan(bus, stream, correlation_id, wait)
    return sorted(hops, key=lambda h: h.stored_at)


async def _scan(bus: Bus, stream: str, correlation_id: str, wait: float) -> list[Hop]:
    info = await bus.js.stream_info(stream)
    last = info.state.last_seq
    if not info.state.messages:
        return []
    found: list[Hop] = []
    done = asyncio.Event()

    async def keep(msg: Msg) -> None:
        meta = msg.metadata
        if (msg.headers or {}).get(CORRELATION) == correlation_id:
            try:
                body = json.loads(msg.data)
            except ValueError:
                body = {"raw": msg.data.decode("utf-8", errors="replace")}
            found.append(Hop(meta.timestamp, stream, msg.subject, body))
        if meta.sequence.stream >= last:
            done.set()

    subscription = await bus.js.subscribe(SUBJECTS[stream], stream=stream, ordered_consumer=True,
                                          deliver_policy=DeliverPolicy.ALL, cb=keep)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), wait)
    finally:
        await subscription.unsubscribe()
    return found
