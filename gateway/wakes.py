"""Wakes: a dispatcher's wait for woken conversations, on every shard's wake list.

On one Redis there is one wake list and one ``BLMPOP`` on it. On a Redis Cluster each
shard has its own (a blocking read of several keys must keep to one slot), so a wait
starts one ``BLMPOP`` per shard (on the blocking client's pool, each on the node serving
its shard) and returns what the first to answer found, with whatever the others found by
then. A read still blocked when the wait returns stays in flight: what it pops is handed
out by the next wait, which starts reads only on the shards without one, so nothing popped
is dropped and a shard is never read twice at once. Each read takes a share of the batch,
so that a busy process does not take more wakes than it would from one list.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.asyncio import Redis

from agent_core.store import as_text


class Wakes:
    """The wake lists of one queue, as one source of woken conversations."""

    def __init__(self, blocking: Redis, keys: list[str]) -> None:
        self.blocking = blocking
        self.keys = keys
        self._reads: dict[str, asyncio.Task[Any]] = {}

    async def wait(self, wait: float, batch: int) -> list[str]:
        """Conversations woken (waiting up to ``wait`` seconds for the first), in wake
        order per shard, without duplicates."""
        if len(self.keys) == 1:
            found: Any = await self.blocking.blmpop(wait, 1, self.keys[0], direction="LEFT",
                                                    count=batch)
            return list(dict.fromkeys(as_text(c) for c in found[1])) if found else []
        share = max(1, batch // len(self.keys))
        for key in self.keys:
            if key not in self._reads:
                self._reads[key] = asyncio.create_task(self._read(key, wait, share),
                                                       name="hermes-wakes")
        await asyncio.wait(self._reads.values(), return_when=asyncio.FIRST_COMPLETED)
        woken: list[str] = []
        failure: BaseException | None = None
        for key, read in list(self._reads.items()):
            if not read.done():
                continue
            del self._reads[key]
            if read.exception() is not None:
                failure = failure or read.exception()
            elif found := read.result():
                woken.extend(as_text(c) for c in found[1])
        if failure is not None and not woken:
            raise failure
        return list(dict.fromkeys(woken))

    async def _read(self, key: str, wait: float, count: int) -> Any:
        return await self.blocking.blmpop(wait, 1, key, direction="LEFT", count=count)

    async def aclose(self) -> None:
        """Cancel the reads in flight (what they would pop stays for the rescans)."""
        reads, self._reads = list(self._reads.values()), {}
        for read in reads:
            read.cancel()
        for read in reads:
            with contextlib.suppress(BaseException):
                await read
