"""CoalescingRedis against a real server: concurrent commands share a round trip, each caller
gets its own reply or error, and nothing blocking or cancelled holds the others up."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from agent_core.store.coalesce import CoalescingRedis
from agent_core.store.redis import connect


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[CoalescingRedis]:
    redis = connect(redis_url)
    assert isinstance(redis, CoalescingRedis)
    yield redis
    await redis.aclose()


def key() -> str:
    return f"co:{uuid.uuid4().hex}"


async def test_concurrent_commands_go_as_one_batch_with_their_own_replies(
        client: CoalescingRedis) -> None:
    keys = [key() for _ in range(50)]
    before = client.batches
    await asyncio.gather(*(client.set(k, f"v{n}") for n, k in enumerate(keys)))
    assert client.batches == before + 1, "the 50 SETs of one turn were one pipeline"
    values = await asyncio.gather(*(client.get(k) for k in keys))
    assert values == [f"v{n}".encode() for n in range(50)]
    await client.delete(*keys)


async def test_a_command_alone_in_its_turn_is_not_batched(client: CoalescingRedis) -> None:
    k = key()
    before = client.batches
    await client.set(k, "1")
    assert await client.incr(k) == 2
    assert client.batches == before
    await client.delete(k)


async def test_a_failing_command_fails_only_its_caller(client: CoalescingRedis) -> None:
    text, number = key(), key()
    await client.set(text, "not a number")
    results = await asyncio.gather(client.incr(number), client.incr(text), client.incr(number),
                                   return_exceptions=True)
    assert results[0] == 1 and results[2] == 2
    assert isinstance(results[1], ResponseError)
    await client.delete(text, number)


async def test_scripts_reload_after_the_server_lost_them_inside_a_batch(
        client: CoalescingRedis) -> None:
    script = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    k = key()
    await client.script_flush()
    results = await asyncio.gather(*(script(keys=[k], args=[1]) for _ in range(10)))
    assert sorted(results) == list(range(1, 11))
    await client.delete(k)


async def test_a_blocking_command_does_not_hold_up_the_others(client: CoalescingRedis) -> None:
    empty, k = key(), key()
    blocked = asyncio.create_task(client.blpop([empty], timeout=2))
    await asyncio.sleep(0)  # the BLPOP is issued in this turn, with the SET below
    assert await asyncio.wait_for(client.set(k, "x"), 0.5)
    await client.rpush(empty, "item")
    assert await asyncio.wait_for(blocked, 2) == (empty.encode(), b"item")
    await client.delete(k)


async def test_a_cancelled_caller_leaves_the_rest_of_its_batch_intact(
        client: CoalescingRedis) -> None:
    keys = [key() for _ in range(5)]
    tasks = [asyncio.create_task(client.set(k, "v")) for k in keys]
    await asyncio.sleep(0)  # every SET has joined the turn's batch
    tasks[0].cancel()  # the one that leads the batch
    tasks[3].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [r is True for r in results] == [False, True, True, False, True]
    assert [await client.exists(k) for k in keys[1:3] + keys[4:]] == [1, 1, 1]
    await client.delete(*keys)


async def test_an_unreachable_server_fails_every_command_of_the_batch() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens here once the socket is closed
    redis = connect(f"redis://127.0.0.1:{port}/0")
    try:
        results = await asyncio.gather(*(redis.get(f"k{n}") for n in range(5)),
                                       return_exceptions=True)
        assert all(isinstance(r, RedisConnectionError) for r in results), results
    finally:
        with contextlib.suppress(Exception):
            await redis.aclose()
