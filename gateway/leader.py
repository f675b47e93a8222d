"""Leadership: one replica at a time does a singleton job (Telegram polling, setting the
webhook), held with a renewed Redis lease and taken over if the leader dies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from .lease import Leases

log = logging.getLogger(__name__)

class Leadership:
    """Campaigns for ``key``; runs ``on_elected`` when it wins and ``on_lost`` when the
    lease is lost or the process stops."""

    def __init__(self, redis: Redis, key: str, *, on_elected: Callable[[], Awaitable[None]],
                 on_lost: Callable[[], Awaitable[None]], lease: float = 15.0) -> None:
        self.redis = redis
        self.key = key
        self.on_elected = on_elected
        self.on_lost = on_lost
        self.lease_ms = int(lease * 1000)
        self.token = ""
        self.leading = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self.leases = Leases(redis)

    def start(self) -> None:
        """Start campaigning in the background."""
        self._task = asyncio.create_task(self._campaign(), name=f"leader:{self.key}")

    async def stop(self) -> None:
        """Step down (the next replica takes over at once)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            # Some client libraries turn a cancellation into their own error; the flag ends
            # the loop regardless, and the wait is bounded.
            await asyncio.wait([self._task], timeout=5)
        if self.leading:
            self.leading = False
            with contextlib.suppress(Exception):
                await self.on_lost()
            with contextlib.suppress(Exception):
                await self.leases.release(self.key, self.token)

    async def _campaign(self) -> None:
        interval = self.lease_ms / 1000 / 3
        while not self._stopping:
            try:
                if self.leading:
                    if not await self.leases.renew(self.key, self.token, self.lease_ms):
                        log.warning("lost leadership of %s", self.key)
                        self.leading = False
                        await self.on_lost()
                elif (token := await self.leases.take(self.key, self.lease_ms)) is not None:
                    log.info("elected leader of %s", self.key)
                    self.token, self.leading = token, True
                    await self.on_elected()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("leadership of %s: %s", self.key, exc)
            await asyncio.sleep(interval)
