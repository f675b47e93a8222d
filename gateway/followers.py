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

On a Redis Cluster one read may only wait on streams of one slot, so there is one reader
per slot followed (a task's stream lives in its conversation's shard: at most one reader
per shard), each on a connection of its own to the node serving that slot, woken by an
unblock sent to that node (``agent_core.store.topology.pinned``).
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
from agent_core.store.topology import pinned, slot_group

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
    """The followers of one process and the readers that serve them: one, or one per
    slot on a cluster."""

    def __init__(self, blocking: aioredis.Redis, control: aioredis.Redis,
                 parse: Callable[[Any], dict[str, Any]]) -> None:
        self.blocking = blocking
        self.control = control
        self.parse = parse
        self._readers: dict[int | None, _Reader] = {}

    @property
    def followed(self) -> int:
        """Streams followed now."""
        return sum(reader.followed for reader in self._readers.values())

    def following(self, key: str) -> int:
        """How many follow ``key`` now."""
        reader = self._readers.get(slot_group(self.blocking, key))
        return len(reader._streams.get(key, ())) if reader is not None else 0

    def join(self, key: str, after: str) -> Follower:
        """Follow ``key`` from after entry ``after``."""
        group = slot_group(self.blocking, key)
        reader = self._readers.get(group)
        if reader is None:
            reader = self._readers[group] = _Reader(self.blocking, self.control, self.parse)
        return reader.join(key, after)

    def leave(self, follower: Follower) -> None:
        """Stop following; the last to leave a reader ends it."""
        reader = self._readers.get(slot_group(self.blocking, follower.key))
        if reader is not None:
            reader.leave(follower)

    def wake_all(self) -> None:
        """Resume every follower (the process is stopping: they look and end)."""
        for reader in self._readers.values():
            reader.wake_all()

    async def aclose(self) -> None:
        """End the readers now."""
        for reader in list(self._readers.values()):
            await reader.aclose()
        self._readers.clear()


class _Reader:
    """The followers of streams that one read may wait on together, and that read."""

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
        #: Where CLIENT UNBLOCK reaches the reader's node (``control`` on one node).
        self._unblocker: Any = control

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
        """End the reader now (and, through it, an unblock on its way)."""
        for task in (self._reader, self._kicker):
            if task is not None and not task.done():
                if task is self._reader:
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._reader = self._kicker = None

    # --- the reader ------------------------------------------------------------------
    async def _read_loop(self) -> None:
        client: aioredis.Redis | None = None
        control = self.control
        try:
            client, self._unblocker = await pinned(self.blocking, next(iter(self._streams)),
                                                   self.control)
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
            # An unblock on its way was for this read: it ends (no read to wake) before the
            # client it is sent on is closed (cancelled, it could leave a connection open).
            kicker = self._kicker
            try:
                if kicker is not None and not kicker.done():
                    with contextlib.suppress(Exception):
                        await asyncio.shield(kicker)
            finally:  # closed also when cancelled while the unblock ends
                unblocker, self._unblocker = self._unblocker, self.control
                if client is not None:
                    await client.aclose()
                if unblocker is not control:
                    await unblocker.aclose()

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
                    if await self._unblocker.client_unblock(client_id):
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
