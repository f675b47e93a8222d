"""Followers: one blocking read per process for every event stream being followed.

Each SSE client and each waiting ``/agent/run`` follows one task's event stream. Had each
its own ``XREAD BLOCK``, each would hold one of the store's blocking connections for as long
as it follows: a few thousand idle followers (an SSE client costs its sender one request)
would take every connection the dispatchers need too. Here one reader task holds one
connection and waits on every followed stream in one ``XREAD BLOCK``, each stream from the
oldest position any of its followers still needs, and hands each new entry to the
followers that have not had it.

A follower that joins while the read is blocked on the streams without its own wakes it
with ``CLIENT UNBLOCK`` (the reader's connection id is read whenever it connects), and the
reader starts the next read with the new stream. An unblock sent before the read reached
the server is sent again until it takes, or the reader has begun a read that includes the
newcomer. The reader ends (and gives its connection back) when nobody follows anything; a
store error ends every follower with it, as a read of its own would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.typing import KeyT, StreamIdT

from agent_core.store import as_text, unavailable

log = logging.getLogger(__name__)

#: Seconds one read blocks: how often an idle reader looks again (under the client's
#: 5-second socket timeout).
BLOCK = 2.0
#: Entries one read takes per stream (more are read by the next one).
COUNT = 500


class Follower:
    """One follower of one stream: the entries it has not taken yet, and what it waits on."""

    __slots__ = ("error", "found", "key", "last", "waiter")

    def __init__(self, key: str, last: str) -> None:
        self.key = key
        #: The id of the newest entry it was given.
        self.last = last
        self.found: deque[dict[str, Any]] = deque()
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[bool] | None = None

    def wake(self, timed_out: bool = False) -> None:
        """Resume the follower's wait (``timed_out``: nothing came in time)."""
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(timed_out)


class Followers:
    """The followers of one process and the single reader that serves them."""

    def __init__(self, blocking: aioredis.Redis, control: aioredis.Redis,
                 parse: Callable[[Any], dict[str, Any]]) -> None:
        #: The pool the reader takes its one connection from.
        self.blocking = blocking
        #: Where CLIENT UNBLOCK is sent.
        self.control = control
        self.parse = parse
        self._streams: dict[str, set[Follower]] = {}
        #: Bumped by every join: the streams the reader must wait on changed.
        self._generation = 0
        #: The generation of the read in flight, None while not reading.
        self._reading: int | None = None
        self._client_id: int | None = None
        self._reader: asyncio.Task[None] | None = None
        self._kicker: asyncio.Task[None] | None = None

    @property
    def followed(self) -> int:
        """Streams followed now."""
        return len(self._streams)

    def join(self, key: str, after: str) -> Follower:
        """Follow ``key`` from after entry ``after``."""
        follower = Follower(key, after)
        self._streams.setdefault(key, set()).add(follower)
        self._generation += 1
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_loop(), name="eventlog-followers")
        else:
            self._kick()
        return follower

    def leave(self, follower: Follower) -> None:
        """Stop following; the last to leave ends the reader."""
        followers = self._streams.get(follower.key)
        if followers is not None:
            followers.discard(follower)
            if not followers:
                del self._streams[follower.key]
        if not self._streams:
            self._generation += 1
            self._kick()

    def wake_all(self) -> None:
        """Resume every follower (the process is stopping: they look and end)."""
        for followers in self._streams.values():
            for follower in followers:
                follower.wake()

    async def aclose(self) -> None:
        """End the reader now."""
        for task in (self._kicker, self._reader):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._reader = self._kicker = None

    # --- the reader ------------------------------------------------------------------
    async def _read_loop(self) -> None:
        client = aioredis.Redis(connection_pool=self.blocking.connection_pool,
                                single_connection_client=True)
        try:
            await client.initialize()
            assert client.connection is not None
            client.connection.register_connect_callback(  # type: ignore[no-untyped-call]
                self._connected)
            self._client_id = int(await client.client_id())
            while self._streams:
                self._reading = self._generation
                streams: dict[KeyT, StreamIdT] = {
                    key: min((f.last for f in followers), key=_order)
                    for key, followers in self._streams.items()}
                try:
                    rows = await self._read(client, streams)
                finally:
                    self._reading = None
                self._hand_out(rows or [])
        except Exception as exc:  # the store: every follower ends with it
            self._fail(exc)
        finally:
            self._reader = None  # from here a join starts another reader
            self._client_id = None
            await client.aclose()

    @unavailable
    async def _read(self, client: aioredis.Redis, streams: dict[KeyT, StreamIdT]) -> Any:
        return await client.xread(streams, block=int(BLOCK * 1000), count=COUNT)

    async def _connected(self, connection: AbstractConnection) -> None:
        """A (re)connection of the reader: its new id, for CLIENT UNBLOCK."""
        await connection.send_command("CLIENT", "ID")
        self._client_id = int(await connection.read_response())

    def _hand_out(self, rows: list[Any]) -> None:
        for key, entries in rows:
            followers = self._streams.get(as_text(key))
            if not followers or not entries:
                continue
            items = [self.parse(entry) for entry in entries]
            for follower in followers:
                fresh = [item for item in items if _order(item["id"]) > _order(follower.last)]
                if fresh:
                    follower.found.extend(fresh)
                    follower.last = fresh[-1]["id"]
                    follower.wake()

    def _fail(self, exc: BaseException) -> None:
        log.info("followers' read failed: %s", exc)
        for followers in self._streams.values():
            for follower in followers:
                follower.error = exc
                follower.wake()
        self._streams.clear()

    def _kick(self) -> None:
        """Have a blocked read that lacks a newcomer (or reads for nobody) start again."""
        if self._kicker is None or self._kicker.done():
            self._kicker = asyncio.create_task(self._unblock(), name="eventlog-kick")

    async def _unblock(self) -> None:
        pauses = _pauses()
        while self._reading is not None and self._reading < self._generation:
            client_id = self._client_id
            if client_id is not None:
                try:
                    if await self.control.client_unblock(client_id):
                        return
                except Exception as exc:  # the read itself will fail or time out
                    log.debug("could not unblock the followers' read: %s", exc)
                    return
            # Not blocked yet (its XREAD is on its way): again, shortly.
            await asyncio.sleep(next(pauses))


def _order(stream_id: str) -> tuple[int, int]:
    head, _, tail = stream_id.partition("-")
    return int(head), int(tail or 0)


def _pauses(first: float = 0.001, cap: float = 0.05) -> Iterator[float]:
    pause = first
    while True:
        yield pause
        pause = min(pause * 2, cap)
