"""EventLog: every task event appended to a Redis stream, so any replica can replay and
follow a task (the SSE endpoint) and a client can resume from Last-Event-ID.

Events are written by one writer task in the order they were emitted (a bus handler only
puts them on a list, so the agent loop never waits on Redis for its own events). A task
emits its events in bursts: the first of a batch arms a timer (``_LINGER``) and the writer
is woken when it fires, or at once by a task's last event; nothing wakes it per event.

The text a model streams (MODEL_DELTA, one event per token or so) is written too, so that
the web chat shows the answer as it is written, also after a reload, from any replica:
a batch that holds only such pieces lingers longer (``_DELTA_LINGER``), and the pieces of
one task next to each other in a batch are written as one event.

Followers (``follow``: the SSE endpoint, a synchronous run waiting on another replica)
share one blocking read per process (``gateway.followers``), so however many follow, they
hold one of the store's blocking connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncGenerator, Iterator
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from agent_core import Event, _json
from agent_core.store import Keys, as_text, store_boundary

from .followers import Followers

log = logging.getLogger(__name__)

_MAXLEN = 2000
_LINGER = 0.005

# KEYS: stream   ARGV: maxlen, ttl, data...
_XADD_MANY = """
for i = 3, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'data', ARGV[i])
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return #ARGV - 2
"""
_DELTA = "MODEL_DELTA"
#: How long a batch of streamed text waits for more (at most ~10 entries a second a task,
#: well under the stream's _MAXLEN for a long answer).
_DELTA_LINGER = 0.1
#: A task's burst of events ends with this one, and a waiter (sync /agent/run, the web
#: chat, an SSE client on any replica) is waiting for it: written at once, not after the
#: linger (which had added 5 ms to every synchronous call).
_LAST = "AGENT_FINISHED"


@store_boundary
class EventLog:
    """Writes events to ``task:<id>:events`` streams and reads them back."""

    def __init__(self, redis: Redis, keys: Keys, *, retention: float,
                 blocking: Redis | None = None) -> None:
        self.redis = redis
        #: The client for XREAD BLOCK (its own pool; see ``OpenStore.blocking``).
        self.blocking = blocking or redis
        self.keys = keys
        self.retention = int(retention)
        #: Events not yet taken by the writer, in the order they were emitted.
        self._pending: list[Event] = []
        #: The batch is due (its linger is over, a task ended, or the log is stopping).
        self._due = False
        self._linger: asyncio.TimerHandle | None = None
        #: What the writer waits on while nothing is due.
        self._woken: asyncio.Future[None] | None = None
        self._stopping = False
        self._writer: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._watchers: dict[str, _Watcher] = {}
        self._followers = Followers(self.blocking, redis, _row)
        self._xadd_sha = redis.register_script(_XADD_MANY).sha

    def start(self) -> None:
        """Start the writer task."""
        self._writer = asyncio.create_task(self._write_loop(), name="eventlog-writer")

    async def stop(self) -> None:
        """Write what is pending, then stop (the followers' read too)."""
        if self._writer is not None:
            self._stopping = True
            self._wake()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        await self._followers.aclose()

    def close_followers(self) -> None:
        """End every ``follow`` and ``watch`` now, and those started later at once (the
        process is stopping: an SSE client reconnects, to another replica, with
        Last-Event-ID)."""
        self._closing.set()
        for watcher in self._watchers.values():
            watcher.wake()
        self._followers.wake_all()

    def __call__(self, event: Event) -> None:
        """EventBus handler."""
        if event.task_id:
            if event.type == _LAST:
                # First the caller waiting for it, so that it answers before the writer and
                # the task's own bookkeeping run (they are woken after it).
                watcher = self._watchers.get(event.task_id)
                if watcher is not None:
                    watcher.put(event.to_dict())
                self._pending.append(event)
                self._wake()
                return
            self._pending.append(event)
            if self._linger is None and not self._due:
                self._linger = asyncio.get_running_loop().call_later(
                    _DELTA_LINGER if event.type == _DELTA else _LINGER, self._wake)

    def _wake(self) -> None:
        """The pending batch is due: the writer takes it now."""
        self._due = True
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._woken is not None and not self._woken.done():
            self._woken.set_result(None)

    @contextlib.contextmanager
    def watch(self, task_id: str) -> Iterator[AsyncGenerator[dict[str, Any], None]]:
        """The task's AGENT_FINISHED events as this process emits them, from now until the
        block ends or ``close_followers``: what a caller whose task runs here waits on
        instead of reading the stream back (each is given at once, ahead of its write: the
        task's state is saved before it is emitted). The caller resumes on the loop's next
        turn after the emit."""
        watcher = _Watcher()
        self._watchers[task_id] = watcher
        try:
            yield self._until_closing(watcher)
        finally:
            self._watchers.pop(task_id, None)

    async def _until_closing(self, watcher: _Watcher) -> AsyncGenerator[dict[str, Any], None]:
        while not self._closing.is_set():
            if watcher.found:
                yield watcher.found.popleft()
                continue
            watcher.waiter = asyncio.get_running_loop().create_future()
            try:
                await watcher.waiter
            finally:
                watcher.waiter = None

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._due:
                self._woken = loop.create_future()
                try:
                    await self._woken
                finally:
                    self._woken = None
            self._due = False
            batch, self._pending = self._pending, []
            if batch:
                await self._write(batch)
            if self._stopping and not self._pending:
                return

    async def _write(self, events: list[Event]) -> None:
        by_task: dict[str, list[bytes]] = {}
        for e in _joined(events):
            # NaN is written as null, which an SSE client's JSON.parse takes.
            by_task.setdefault(e.task_id, []).append(
                _json.dumps(e.to_dict(), default=str))
        try:
            try:
                await self._xadd(by_task)
            except NoScriptError:  # first write, or the server restarted and lost it
                await self.redis.script_load(_XADD_MANY)
                await self._xadd(by_task)
        except Exception as exc:  # the event log must never take a task down
            log.warning("could not record %d events: %s", len(events), exc)

    async def _xadd(self, by_task: dict[str, list[bytes]]) -> None:
        # Plain EVALSHA: redis-py precedes a pipeline holding Script objects with a SCRIPT
        # EXISTS round trip on every execute. All-or-nothing on NOSCRIPT (one script).
        pipe = self.redis.pipeline(transaction=False)
        for task_id, datas in by_task.items():
            pipe.evalsha(self._xadd_sha, 1, self.keys.task_events(task_id), _MAXLEN,
                         self.retention, *datas)
        await pipe.execute()

    async def read(self, task_id: str, after: str = "0-0", count: int = 1000
                   ) -> list[dict[str, Any]]:
        """Recorded events after a stream id, oldest first."""
        return await self.read_stream(self.keys.task_events(task_id), after, count)

    async def read_stream(self, key: str, after: str = "0-0", count: int = 1000
                          ) -> list[dict[str, Any]]:
        """The entries (``data``: JSON) of stream ``key`` after a stream id, oldest
        first."""
        start = f"({after}" if after != "0-0" else "-"
        rows: Any = await self.redis.xrange(key, min=start, count=count)
        return [_row(r) for r in rows]

    def follow(self, task_id: str, after: str = "0-0", *, poll: float = 2.0
               ) -> AsyncGenerator[dict[str, Any], None]:
        """Recorded events after ``after``, then new ones as they come (from any replica),
        until ``close_followers``; a KEEPALIVE item after each ``poll`` seconds without
        one. StoreUnavailableError when the store cannot be read."""
        return self.follow_stream(self.keys.task_events(task_id), after, poll=poll)

    async def follow_stream(self, key: str, after: str = "0-0", *, poll: float = 2.0
                            ) -> AsyncGenerator[dict[str, Any], None]:
        """``follow`` for any stream of JSON ``data`` entries (the console's feed too),
        through the same one blocking read."""
        last = after
        for item in await self.read_stream(key, last):
            last = item["id"]
            yield item
        if self._closing.is_set():
            return
        loop = asyncio.get_running_loop()
        follower = self._followers.join(key, last)
        try:
            while not self._closing.is_set():
                if follower.found:
                    yield follower.found.popleft()
                    continue
                if follower.error is not None:
                    raise follower.error
                follower.waiter = loop.create_future()
                timer = loop.call_later(poll, follower.wake, True)
                try:
                    timed_out = await follower.waiter
                finally:
                    timer.cancel()
                    follower.waiter = None
                if timed_out and not follower.found:
                    yield {"id": None, "type": "KEEPALIVE"}
        finally:
            self._followers.leave(follower)


def _joined(events: list[Event]) -> list[Event]:
    """``events`` with each run of one task's streamed text pieces as one piece."""
    out: list[Event] = []
    last: dict[str, int] = {}  # task id -> index in out of its last event
    for e in events:
        at = last.get(e.task_id)
        if e.type == _DELTA and at is not None and out[at].type == _DELTA:
            before = out[at]
            out[at] = Event(before.type, before.trace_id, before.conversation_id,
                            before.round, {**before.payload, "text": str(
                                before.payload.get("text", "")) + str(
                                e.payload.get("text", ""))},
                            before.timestamp, task_id=before.task_id)
            continue
        last[e.task_id] = len(out)
        out.append(e)
    return out


class _Watcher:
    """One watched task's events not yet taken, and the future its caller is parked on
    (resolved by the emit itself: no task or queue in between)."""

    __slots__ = ("found", "waiter")

    def __init__(self) -> None:
        self.found: deque[dict[str, Any]] = deque()
        self.waiter: asyncio.Future[None] | None = None

    def put(self, event: dict[str, Any]) -> None:
        self.found.append(event)
        self.wake()

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


def _row(row: Any) -> dict[str, Any]:
    stream_id, fields = row
    data = fields.get(b"data") or fields.get("data")
    return {"id": as_text(stream_id), **json.loads(data)}
