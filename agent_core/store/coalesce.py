"""CoalescingRedis: commands that different coroutines issue in the same turn of the event
loop go to the server together, as one pipeline.

redis-py sends each command on its own pooled connection: take a connection (with a
liveness poll of its socket), write, wait, read, give it back. Under a burst that is most
of the cost of a round trip: 200 concurrent script calls took ~90 µs of CPU each here,
against ~35 µs each coalesced (``bench/memory.py``, second line). So each command waits for
the end of the current loop turn; if it is alone it is sent the usual way, otherwise the
turn's commands share one connection, one write and one read pass, and each caller gets
its own reply or its own error. The first command of a turn leads: it yields once, then
sends alone or starts the batch.

Semantics are those of separate commands: nothing is atomic across callers (a pipeline
without MULTI), a server error fails only the command that caused it, and a connection
failure fails every command of the batch (after the client's usual retries). A caller
cancelled after its command was sent does not unsend it. Blocking commands never join a
batch: they would hold up everyone else's replies.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

#: Commands that wait on the server, or change the connection they run on.
_ALONE = frozenset({
    "BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP",
    "XREAD", "XREADGROUP", "WAIT", "WAITAOF", "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE",
    "MONITOR", "MULTI", "EXEC", "WATCH", "UNWATCH", "SELECT", "AUTH", "HELLO", "RESET",
    "CLIENT SETNAME", "CLIENT SETINFO", "CLIENT TRACKING", "CLIENT REPLY", "READONLY",
})

_Queued = tuple[tuple[Any, ...], dict[str, Any], "asyncio.Future[Any]"]


class CoalescingRedis(aioredis.Redis):
    """A ``redis.asyncio.Redis`` that pipelines the concurrent commands of one loop turn."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn: list[_Queued] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        #: Batches of more than one command sent so far.
        self.batches = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if str(args[0]).upper() in _ALONE or self.single_connection_client:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        loop = asyncio.get_running_loop()
        if self._turn is not None:  # another command of this turn leads: join its batch
            future: asyncio.Future[Any] = loop.create_future()
            self._turn.append((args, options, future))
            return await future
        turn: list[_Queued] = []
        self._turn = turn
        try:
            await asyncio.sleep(0)  # the end of this turn: whoever issues a command joins
        except asyncio.CancelledError:
            self._turn = None
            self._start(turn)  # the followers' commands still go
            raise
        self._turn = None
        followers = [queued for queued in turn if not queued[2].done()]
        if not followers:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        future = loop.create_future()
        self._start([(args, options, future), *followers])
        return await future

    def _start(self, batch: list[_Queued]) -> None:
        """Send a batch in a task of its own, so that no caller's cancellation stops it."""
        batch = [queued for queued in batch if not queued[2].done()]
        if batch:
            task = asyncio.ensure_future(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Queued]) -> None:
        self.batches += 1
        pipe = self.pipeline(transaction=False)
        for args, options, _ in batch:
            pipe.execute_command(*args, **options)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc) if isinstance(exc, Exception) else future.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        """Wait for batches in flight, then close as usual."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        await super().aclose(close_connection_pool)
