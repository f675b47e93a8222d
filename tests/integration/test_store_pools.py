"""How the gateway uses its Redis connections: blocking reads on their own pool, a warm pool
after start, the lean connection handshake; and what its event log writes and gives."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from agent_core import Event, EventType
from agent_core.settings import Settings
from agent_core.store import connect, warm
from agent_core.store.factory import open_store
from agent_core.store.keys import Keys
from gateway.eventlog import EventLog


async def test_idle_followers_cannot_take_the_connections_other_work_needs(
        redis_url: str) -> None:
    main = connect(redis_url, max_connections=2)
    blocking = connect(redis_url, max_connections=50)
    log = EventLog(main, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60, blocking=blocking)

    async def follow(task_id: str) -> None:
        async for _ in log.follow(task_id, poll=5.0):
            pass

    followers = [asyncio.create_task(follow(f"task-{i}")) for i in range(10)]
    try:
        await asyncio.sleep(0.3)  # every follower is now blocked in XREAD
        assert await asyncio.wait_for(main.set("still", "works"), 1.0)
        assert await asyncio.wait_for(main.get("still"), 1.0) == b"works"
    finally:
        for task in followers:
            task.cancel()
        for task in followers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await main.aclose()
        await blocking.aclose()


async def test_warm_opens_connections_ahead_of_traffic(redis_url: str) -> None:
    client = connect(redis_url, max_connections=64)
    try:
        name = f"warm-{uuid.uuid4().hex[:8]}"
        await client.client_setname(name)
        await warm(client, 12)
        pool = client.connection_pool
        assert len(pool._available_connections) >= 12  # type: ignore[attr-defined]
        before = await client.client_list()
        await asyncio.gather(*(client.ping() for _ in range(12)))
        assert len(await client.client_list()) == len(before), "no new connection was needed"
    finally:
        await client.aclose()


async def test_new_connections_skip_the_optional_handshake(redis_url: str) -> None:
    client = connect(redis_url)
    try:
        await client.ping()
        me = await client.client_info()
        assert me.get("lib-name", "") in ("", None), "CLIENT SETINFO was not sent"
    finally:
        await client.aclose()


async def test_open_store_warms_the_pool_and_closes_both_clients(redis_url: str,
                                                                 tmp_path: Path) -> None:
    observer = connect(redis_url, max_connections=1)

    async def connections() -> int:
        return len(await observer.client_list())

    try:
        before = await connections()
        settings = Settings(_env_file=None, redis_url=redis_url,  # type: ignore[call-arg]
                            hermes_workers=4, hermes_data_dir=tmp_path)
        opened = await open_store(settings)
        assert await connections() >= before + 4 + 8, "the pool was opened ahead of traffic"
        assert opened.blocking.connection_pool is not opened.store.redis.connection_pool
        await opened.blocking.ping()
        await opened.close()
        for _ in range(50):  # the server notices closed sockets asynchronously
            if await connections() == before:
                break
            await asyncio.sleep(0.02)
        assert await connections() == before, "both clients closed every connection"
    finally:
        await observer.aclose()


async def test_events_are_recorded_after_the_server_lost_its_scripts(redis_url: str) -> None:
    client = connect(redis_url)
    log = EventLog(client, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60)
    try:
        await client.script_flush()  # as after a restart of a server without persistence
        log.start()
        for n in range(3):
            log(Event(EventType.TOOL_STARTED, "trace", "c1", n, {"n": n}, task_id="task-a"))
        log(Event(EventType.TOOL_STARTED, "trace", "c2", 0, {"n": 9}, task_id="task-b"))
        await log.stop()
        assert [e["payload"]["n"] for e in await log.read("task-a")] == [0, 1, 2]
        assert [e["payload"]["n"] for e in await log.read("task-b")] == [9]
    finally:
        await client.aclose()


async def test_a_tasks_last_event_is_written_at_once_with_what_came_before(
        redis_url: str, monkeypatch: Any) -> None:
    """Events linger to be written together, but AGENT_FINISHED ends a task's burst and
    someone is waiting for it (a sync /agent/run, an SSE client): it goes at once, with
    the events queued before it, in order."""
    import gateway.eventlog

    monkeypatch.setattr(gateway.eventlog, "_LINGER", 3600.0)  # only the flush can write
    client = connect(redis_url)
    log = EventLog(client, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60)
    log.start()
    try:
        log(Event(EventType.TOOL_STARTED, "trace", "c1", 0, {"n": 1}, task_id="task-a"))
        log(Event(EventType.AGENT_FINISHED, "trace", "c1", 0, {"n": 2}, task_id="task-a"))

        async def both() -> list[Any]:
            async for event in log.follow("task-a", poll=0.2):
                if event["type"] == "AGENT_FINISHED":
                    return [e["payload"]["n"] for e in await log.read("task-a")]
            return []

        assert await asyncio.wait_for(both(), 30) == [1, 2]
    finally:
        log.close_followers()
        await log.stop()
        await client.aclose()


async def test_any_payload_is_recorded_as_json_every_reader_takes(redis_url: str) -> None:
    client = connect(redis_url)
    log = EventLog(client, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60)
    log.start()
    try:
        when = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
        for payload in ({"text": "Grüße ✓", 3: "int key"}, {"big": 2**70},
                        {"nan": float("nan"), "when": when}):
            log(Event(EventType.TOOL_FINISHED, "trace", "c1", 0, payload, task_id="task-j"))
        await log.stop()
        raw = [fields[b"data"] for _, fields in
               await client.xrange(log.keys.task_events("task-j"))]
        assert [json.loads(r, parse_constant=_refuse)["payload"] for r in raw] == [
            {"text": "Grüße ✓", "3": "int key"}, {"big": 2**70},
            {"nan": None, "when": when.isoformat()}]
    finally:
        await client.aclose()


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} is not JSON")


async def test_a_watch_gives_its_task_s_last_event_as_emitted_until_followers_close(
        redis_url: str) -> None:
    client = connect(redis_url)
    log = EventLog(client, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60)
    try:
        with log.watch("task-w") as finished:
            for task_id in ("task-other", "task-w"):
                log(Event(EventType.TOOL_STARTED, "t", "c1", 0, {}, task_id=task_id))
                log(Event(EventType.AGENT_FINISHED, "t", "c1", 0, {"outcome": "answered"},
                          task_id=task_id))
            first = await asyncio.wait_for(anext(finished), 5)
            assert first["task_id"] == "task-w" and first["payload"]["outcome"] == "answered"
            log.close_followers()
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(anext(finished), 5)
        assert log._watchers == {}, "the watch ended with its block"
    finally:
        await client.aclose()


async def test_a_watch_resumes_its_caller_on_the_loop_s_next_turn(redis_url: str) -> None:
    # A synchronous /agent/run answers from here: the emit itself wakes it, ahead of the
    # writer and of the task's own bookkeeping (which run in the turns after).
    client = connect(redis_url)
    log = EventLog(client, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60)
    try:
        with log.watch("task-n") as finished:
            waiting = asyncio.ensure_future(anext(finished))
            await asyncio.sleep(0)  # parked on its future
            log(Event(EventType.AGENT_FINISHED, "t", "c1", 0, {"outcome": "answered"},
                      task_id="task-n"))
            turns = 0
            while not waiting.done():
                turns += 1
                await asyncio.sleep(0)
            assert turns == 1
            assert waiting.result()["payload"] == {"outcome": "answered"}
    finally:
        await client.aclose()


async def test_a_task_s_burst_of_events_is_one_write_and_its_last_is_not_lingered_for(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.eventlog

    monkeypatch.setattr(gateway.eventlog, "_LINGER", 3600.0)  # only the last event writes
    client = connect(redis_url)
    log = EventLog(client, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60)
    batches: list[int] = []
    write = log._write

    async def counted(events: list[Event]) -> None:
        batches.append(len(events))
        await write(events)

    monkeypatch.setattr(log, "_write", counted)
    log.start()
    try:
        for n in range(5):
            log(Event(EventType.TOOL_STARTED, "t", "c1", 0, {"n": n}, task_id="task-b"))
        await asyncio.sleep(0.05)
        assert batches == [], "nothing written while the burst goes on"
        log(Event(EventType.AGENT_FINISHED, "t", "c1", 0, {"n": 5}, task_id="task-b"))

        async def recorded() -> list[int]:
            while len(rows := await log.read("task-b")) < 6:
                await asyncio.sleep(0.01)
            return [r["payload"]["n"] for r in rows]

        assert await asyncio.wait_for(recorded(), 30) == [0, 1, 2, 3, 4, 5]
        assert batches == [6], "the burst in one write"
    finally:
        await log.stop()
        await client.aclose()


async def test_stopping_writes_what_is_pending_however_long_the_linger(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.eventlog

    monkeypatch.setattr(gateway.eventlog, "_LINGER", 3600.0)
    client = connect(redis_url)
    log = EventLog(client, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60)
    log.start()
    try:
        for n in range(3):
            log(Event(EventType.TOOL_STARTED, "t", "c1", 0, {"n": n}, task_id="task-s"))
        await asyncio.wait_for(log.stop(), 30)
        assert [r["payload"]["n"] for r in await log.read("task-s")] == [0, 1, 2]
    finally:
        await client.aclose()


async def _blocking_connections(observer: Any, name: str) -> list[dict[str, Any]]:
    """The server's view of the connections named ``name``."""
    return [c for c in await observer.client_list() if c.get("name") == name]


async def test_followers_of_many_tasks_share_one_blocking_connection(redis_url: str) -> None:
    """More followers than the blocking pool has connections, each of another task: every
    one gets its events as they are written, over one connection. (One blocking read per
    follower held a connection each: the first three waited on tasks that had nothing yet,
    and the others waited for a connection.)"""
    name = f"followers-{uuid.uuid4().hex[:8]}"
    main = connect(redis_url)
    blocking = connect(redis_url, max_connections=3, multiplex=False, client_name=name)
    observer = connect(redis_url, multiplex=False)
    log = EventLog(main, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60, blocking=blocking)
    log.start()
    got: dict[str, list[int]] = {}

    async def follow(task_id: str) -> None:
        async for event in log.follow(task_id, poll=5.0):
            if event["type"] == "KEEPALIVE":
                continue
            got.setdefault(task_id, []).append(event["payload"]["n"])
            if event["type"] == "AGENT_FINISHED":
                return

    def emit(task_id: str) -> None:
        for n in range(3):
            log(Event(EventType.TOOL_STARTED, "t", "c", 0, {"n": n}, task_id=task_id))
        log(Event(EventType.AGENT_FINISHED, "t", "c", 0, {"n": 3}, task_id=task_id))

    late = [asyncio.create_task(follow(f"late-{i}")) for i in range(3)]
    early: list[asyncio.Task[None]] = []
    try:
        async with asyncio.timeout(10):  # the late ones' read is blocked on the server
            while not any(c.get("cmd") == "xread"
                          for c in await _blocking_connections(observer, name)):
                await asyncio.sleep(0.01)
        early = [asyncio.create_task(follow(f"early-{i}")) for i in range(12)]
        for i in range(12):
            emit(f"early-{i}")
        async with asyncio.timeout(3):  # well under the late followers' 5 s reads
            await asyncio.gather(*early)
        assert got == {f"early-{i}": [0, 1, 2, 3] for i in range(12)}
        assert len(await _blocking_connections(observer, name)) == 1
        for i in range(3):
            emit(f"late-{i}")
        async with asyncio.timeout(10):
            await asyncio.gather(*late)
        assert all(got[f"late-{i}"] == [0, 1, 2, 3] for i in range(3))
    finally:
        for task in (*late, *early):
            task.cancel()
        await asyncio.gather(*late, *early, return_exceptions=True)
        await log.stop()
        for client in (main, blocking, observer):
            await client.aclose()


async def test_two_followers_of_one_task_each_get_what_they_have_not_had(
        redis_url: str) -> None:
    client = connect(redis_url)
    log = EventLog(client, Keys(f"t{uuid.uuid4().hex[:8]}"), retention=60)
    log.start()
    try:
        log(Event(EventType.TOOL_STARTED, "t", "c", 0, {"n": 0}, task_id="task-2"))
        log(Event(EventType.TOOL_STARTED, "t", "c", 0, {"n": 1}, task_id="task-2"))
        await log.stop()
        log.start()
        first = (await log.read("task-2"))[0]["id"]

        async def follow(after: str) -> list[int]:
            seen = []
            async for event in log.follow("task-2", after, poll=5.0):
                seen.append(event["payload"]["n"])
                if event["type"] == "AGENT_FINISHED":
                    return seen
            return seen

        everything = asyncio.create_task(follow("0-0"))
        resumed = asyncio.create_task(follow(first))  # as after Last-Event-ID
        key = log.keys.task_events("task-2")
        async with asyncio.timeout(10):  # both have read the past and joined the reader
            while log._followers.following(key) < 2:
                await asyncio.sleep(0.01)
        log(Event(EventType.TOOL_STARTED, "t", "c", 0, {"n": 2}, task_id="task-2"))
        log(Event(EventType.AGENT_FINISHED, "t", "c", 0, {"n": 3}, task_id="task-2"))
        async with asyncio.timeout(10):
            assert await everything == [0, 1, 2, 3]
            assert await resumed == [1, 2, 3]
            while log._followers.followed:  # their generators are closed, soon after
                await asyncio.sleep(0.01)
    finally:
        await log.stop()
        await client.aclose()
