"""Pacer: spaces out sends per key (a chat, a channel, the whole bot) to stay under a
platform's rate limits, and holds a key back after a 429 for as long as it asked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class Pacer:
    """Minimum intervals per key; a send waits for every key it touches."""

    def __init__(self, *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self._next: dict[str, float] = {}
        self._clock = clock
        self._sleep = sleep
        self._lock = asyncio.Lock()

    async def wait(self, limits: dict[str, float]) -> None:
        """Wait until each key may send again, then book the next slot of each.

        ``limits`` maps a key to its minimum interval in seconds.
        """
        async with self._lock:
            now = self._clock()
            start = max([now, *(self._next.get(k, 0.0) for k in limits)])
            for key, interval in limits.items():
                self._next[key] = start + interval
        delay = start - now
        if delay > 0:
            await self._sleep(delay)

    def hold(self, key: str, seconds: float) -> None:
        """The platform said 429: nothing for ``key`` until ``seconds`` from now."""
        self._next[key] = max(self._next.get(key, 0.0), self._clock() + seconds)

    def take_within(self, limits: dict[str, float], most: float) -> float | None:
        """Book the next slot of each key if they are all free within ``most`` seconds:
        the seconds to wait for it, or None (nothing booked) when that is later."""
        now = self._clock()
        start = max([now, *(self._next.get(k, 0.0) for k in limits)])
        if start - now > most:
            return None
        for key, interval in limits.items():
            self._next[key] = start + interval
        return start - now

    def try_take(self, limits: dict[str, float]) -> bool:
        """Book the next slot of each key if every one of them is free now (False, and
        nothing booked, if one is not): for updates that are dropped rather than delayed."""
        now = self._clock()
        if any(self._next.get(k, 0.0) > now for k in limits):
            return False
        for key, interval in limits.items():
            self._next[key] = now + interval
        return True
