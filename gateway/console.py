"""The operator's console's parts in a running gateway: the activity it records
(``gateway.activity``), the overview it reads (``gateway.overview``) and the dead letters
it lists and redelivers (``gateway.deadletters``). Its page is ``gateway.pages``; its API
``gateway.api.console``, ``gateway.api.deadletters`` and ``gateway.api.hub``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from agent_core.background import repeating

from .activity import Activity, Figures
from .deadletters import DeadLetters
from .delivery import Deliverer
from .overview import Overview

#: How often gathered activity is written, and this process's figures.
FLUSH_EVERY = 0.25
BEAT_EVERY = 5.0


@dataclass(slots=True)
class Console:
    """The console's parts."""

    activity: Activity
    overview: Overview
    dead_letters: DeadLetters

    @classmethod
    def open(cls, redis: Redis, prefix: str, deliverer: Deliverer) -> Console:
        """The parts on the gateway's store (the deliverer's dead letters)."""
        return cls(Activity(redis, prefix), Overview(redis, prefix),
                   DeadLetters(redis, deliverer))

    async def start(self, stack: contextlib.AsyncExitStack, figures: Figures) -> None:
        """Write gathered activity and this process's figures (now, then in the
        background) until the stack closes (a last flush then, and this process's figures
        removed)."""
        self.activity.figures = figures
        await self.activity.beat()  # a failure is logged: the figures never stop a start
        flush = repeating(self.activity.flush, FLUSH_EVERY, "console activity")
        beat = repeating(self.activity.beat, BEAT_EVERY, "console figures")

        async def stop() -> None:
            await beat.stop()
            await flush.stop()
            with contextlib.suppress(Exception):
                await self.activity.flush()
            await self.activity.leave()

        stack.push_async_callback(stop)

    async def gauges(self, hub: Any = None) -> dict[str, float]:
        """What /metrics reads from the store at scrape (and the hub's live agents)."""
        figures = await self.overview.gauges()
        if hub is not None:
            from hub.discovery import discover

            with contextlib.suppress(Exception):
                figures["hub_agents"] = float(len(await discover(hub, "*", wait=1.0)))
        return figures
