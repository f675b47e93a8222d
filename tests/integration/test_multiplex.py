"""MultiplexedRedis against a real server: concurrent commands share one connection and one
write, each caller gets its own reply or error, and nothing blocking, cancelled, killed,
stuck or refused leaves the others waiting or wrong."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio as aioredis
import redis.utils
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, DataError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from agent_core.store import connect
from agent_core.store.multiplex import MultiplexedRedis, pack_command


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[MultiplexedRedis]:
    redis = connect(redis_url)
    assert isinstance(redis, MultiplexedRedis)
    yield redis
    await redis.aclose()


@pytest.fixture
async def plain(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    redis = connect(redis_url, multiplex=False)
    yield redis
    await redis.aclose()


def key() -> str:
    return f"mx:{uuid.uuid4().hex}"


async def test_concurrent_commands_share_one_connection_and_one_write(
        client: MultiplexedRedis) -> None:
    keys = [key() for _ in range(50)]
    await client.ping()
    before = client.writes
    assert await asyncio.gather(*(client.set(k, f"v{n}") for n, k in enumerate(keys))) == \
        [True] * 50
    assert client.writes == before + 1, "the 50 SETs of one turn went in one write"
    values = await asyncio.gather(*(client.get(k) for k in keys))
    assert values == [f"v{n}".encode() for n in range(50)]
    ids = await asyncio.gather(*(client.client_id() for _ in range(10)))
    assert len(set(ids)) == 1, "every command ran on the same connection"
    await client.delete(*keys)


async def test_replies_are_shaped_by_redis_py_callbacks(client: MultiplexedRedis) -> None:
    h, z, s = key(), key(), key()
    assert await client.hset(h, mapping={"a": "1", "b": "2"}) == 2
    assert await client.hgetall(h) == {b"a": b"1", b"b": b"2"}
    await client.zadd(z, {"x": 1.5, "y": 2})
    assert await client.zrange(z, 0, -1, withscores=True) == [(b"x", 1.5), (b"y", 2.0)]
    assert await client.set(s, "v") is True
    assert await client.set(s, "w", nx=True) is None
    assert await client.exists(s, h, key()) == 2
    assert await client.config_get("maxmemory-policy") != {}
    await client.delete(h, z, s)


async def test_a_pipeline_without_multi_shares_the_connection_and_one_write(
        client: MultiplexedRedis) -> None:
    h, text = key(), key()
    await client.set(text, "not a number")
    own = await client.client_id()
    before = client.writes
    pipe = client.pipeline(transaction=False)
    pipe.hset(h, mapping={"a": "1"}).hgetall(h).client_id()
    assert await pipe.execute() == [1, {b"a": b"1"}, own]
    assert client.writes == before + 1

    pipe = client.pipeline(transaction=False)
    pipe.incr(h + ":n").incr(text).incr(h + ":n")
    with pytest.raises(ResponseError, match="Command # 2"):
        await pipe.execute()
    assert await client.get(h + ":n") == b"2", "the commands around the error still ran"
    pipe = client.pipeline(transaction=False)
    pipe.incr(h + ":n").incr(text)
    replies = await pipe.execute(raise_on_error=False)
    assert replies[0] == 3 and isinstance(replies[1], ResponseError)

    transaction = client.pipeline(transaction=True)
    transaction.client_id().incr(h + ":n")
    pooled, count = await transaction.execute()
    assert pooled != own and count == 4, "MULTI/EXEC keeps a pooled connection of its own"
    await client.delete(h, text, h + ":n")


async def test_a_failing_command_fails_only_its_caller(client: MultiplexedRedis) -> None:
    text, number = key(), key()
    await client.set(text, "not a number")
    results = await asyncio.gather(client.incr(number), client.incr(text), client.incr(number),
                                   return_exceptions=True)
    assert results[0] == 1 and results[2] == 2
    assert isinstance(results[1], ResponseError)
    assert await client.incr(number) == 3, "the replies after an error still line up"
    await client.delete(text, number)


async def test_scripts_reload_after_the_server_lost_them_mid_burst(
        client: MultiplexedRedis) -> None:
    script = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    k = key()
    await client.script_flush()
    results = await asyncio.gather(*(script(keys=[k], args=[1]) for _ in range(10)))
    assert sorted(results) == list(range(1, 11))
    await client.delete(k)


async def test_a_script_goes_on_the_shared_write_and_its_error_fails_only_its_caller(
        client: MultiplexedRedis) -> None:
    add = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    broken = client.register_script("return redis.call('NOSUCHCOMMAND')")
    k = key()
    await client.load_scripts()  # as a service does at start: no NOSCRIPT round
    before = client.writes
    results = await asyncio.gather(add(keys=[k], args=[2]), broken(keys=[], args=[]),
                                   add(keys=[k], args=[3]), return_exceptions=True)
    assert results[0] == 2 and results[2] == 5
    assert isinstance(results[1], ResponseError) and "unknown command" in str(results[1]).lower()
    assert client.writes - before == 1, "the three scripts went out in one write"
    # In a pipeline a script is redis-py's own: queued there, run with the pipeline.
    pipe = client.pipeline(transaction=True)
    await add(keys=[k], args=[10], client=pipe)
    pipe.get(k)
    assert await pipe.execute() == [15, b"15"]
    await client.delete(k)


async def test_load_scripts_puts_every_registered_script_on_the_server(
        client: MultiplexedRedis) -> None:
    first = client.register_script("return 1")
    second = client.register_script("return 2")
    client.register_script("return 1")  # the same script again counts once
    await client.script_flush()
    assert await client.script_exists(first.sha, second.sha) == [False, False]
    assert await client.load_scripts() >= 2
    assert await client.script_exists(first.sha, second.sha) == [True, True]


async def test_a_blocking_command_does_not_hold_up_the_others(
        client: MultiplexedRedis) -> None:
    empty, k = key(), key()
    blocked = asyncio.create_task(client.blpop([empty], timeout=2))
    await asyncio.sleep(0)  # the BLPOP is issued in this turn, with the SET below
    assert await asyncio.wait_for(client.set(k, "x"), 0.5)
    await client.rpush(empty, "item")
    assert await asyncio.wait_for(blocked, 2) == (empty.encode(), b"item")
    await client.delete(k)


async def test_a_cancelled_caller_does_not_shift_the_replies_of_the_others(
        client: MultiplexedRedis) -> None:
    keys = [key() for _ in range(6)]
    await client.ping()
    tasks = [asyncio.create_task(client.incrby(k, n + 1)) for n, k in enumerate(keys)]
    for _ in range(3):
        await asyncio.sleep(0)  # written, replies not read yet
    tasks[0].cancel()
    tasks[3].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert [results[n] for n in (1, 2, 4, 5)] == [2, 3, 5, 6]
    # What was written still ran, and later commands get their own replies.
    assert await asyncio.gather(*(client.get(k) for k in keys)) == \
        [str(n + 1).encode() for n in range(6)]
    await client.delete(*keys)


async def test_messages_the_server_pushes_on_its_own_do_not_shift_the_replies(
        client: MultiplexedRedis, plain: aioredis.Redis) -> None:
    if getattr(redis.utils, "DEFAULT_RESP_VERSION", 2) != 3:
        pytest.skip("pushes need RESP3 (redis-py 8's default)")
    k, other = key(), key()
    await client.execute_command("CLIENT", "TRACKING", "ON")  # on the shared connection
    await client.set(other, "mine")
    await client.get(k)  # now tracked: a change to it is pushed to this connection
    await plain.set(k, "changed")
    await asyncio.sleep(0.05)  # the invalidation push arrives before any reply
    assert await client.get(other) == b"mine"
    assert await client.get(k) == b"changed"
    await client.delete(k, other)


async def test_a_killed_connection_is_replaced_and_the_command_retried(
        client: MultiplexedRedis, plain: aioredis.Redis) -> None:
    k = key()
    first = await client.client_id()
    assert await plain.client_kill_filter(_id=first) == 1
    await asyncio.sleep(0.05)  # the close reaches the client
    assert await client.set(k, "after") is True
    assert await client.client_id() != first
    assert await client.get(k) == b"after"
    await client.delete(k)


async def test_commands_in_flight_when_the_connection_dies_are_retried(
        client: MultiplexedRedis, plain: aioredis.Redis) -> None:
    k = key()
    doomed = await client.client_id()
    # The kill and the INCRs leave in the same turn: the kill runs first on another
    # connection; the INCRs fail with the connection, then go again on a new one.
    results = await asyncio.gather(plain.client_kill_filter(_id=doomed),
                                   *(client.incr(k) for _ in range(5)),
                                   return_exceptions=True)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert int(await client.get(k) or 0) >= 5
    await client.delete(k)


async def test_a_stuck_server_times_out_and_the_client_recovers(
        redis_url: str, plain: aioredis.Redis) -> None:
    client = MultiplexedRedis.from_url(redis_url, socket_timeout=0.3,
                                       retry=Retry(NoBackoff(), 0))
    try:
        await client.ping()
        await plain.execute_command("CLIENT", "PAUSE", 1000, "ALL")
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError):
            await client.get(key())
        assert time.monotonic() - started < 0.9
        await plain.execute_command("CLIENT", "UNPAUSE")
        assert await client.ping() is True
    finally:
        with contextlib.suppress(Exception):
            await plain.execute_command("CLIENT", "UNPAUSE")
        await client.aclose()


async def test_a_refused_password_is_an_authentication_error_not_retried(
        redis_tcp_url: str) -> None:
    parts = urlsplit(redis_tcp_url)
    if not parts.password:
        pytest.skip("the test server has no password")
    wrong = parts._replace(netloc=f":wrong-{uuid.uuid4().hex}@{parts.hostname}:{parts.port}")
    client = connect(urlunsplit(wrong))
    try:
        started = time.monotonic()
        with pytest.raises(AuthenticationError):
            await client.ping()
        assert time.monotonic() - started < 0.5, "no retries with backoff"
    finally:
        await client.aclose()


async def test_tcp_and_a_database_number(redis_tcp_url: str) -> None:
    url = urlsplit(redis_tcp_url)._replace(path="/3")
    client, other = connect(urlunsplit(url)), connect(urlunsplit(url), multiplex=False)
    k = key()
    try:
        assert await client.set(k, "in db 3") is True
        assert await other.get(k) == b"in db 3"
        assert (await client.client_info())["db"] == 3
    finally:
        await client.delete(k)
        await client.aclose()
        await other.aclose()


async def test_a_tcp_connection_probes_for_a_silently_dropped_peer(
        redis_tcp_url: str) -> None:
    client = connect(redis_tcp_url)
    try:
        await client.ping()
        assert isinstance(client, MultiplexedRedis) and client._link is not None
        sock = client._link.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 60
    finally:
        await client.aclose()


async def test_closing_waits_for_the_replies_in_flight(redis_url: str) -> None:
    client = connect(redis_url)
    keys = [key() for _ in range(20)]
    await client.ping()
    sets = [asyncio.create_task(client.set(k, "v")) for k in keys]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await client.aclose()
    assert await asyncio.gather(*sets) == [True] * 20
    check = connect(redis_url)
    assert await check.exists(*keys) == 20
    await check.delete(*keys)
    await check.aclose()


async def test_a_decoding_client_keeps_redis_py_s_own_path(redis_url: str) -> None:
    client = MultiplexedRedis.from_url(redis_url, decode_responses=True)
    k = key()
    try:
        await client.set(k, "text")
        assert await client.get(k) == "text"
        assert client.writes == 0
    finally:
        await client.delete(k)
        await client.aclose()


async def test_an_unreachable_server_fails_every_command() -> None:
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


async def test_a_two_word_command_is_split_for_the_server(client: MultiplexedRedis) -> None:
    assert "maxmemory" in await client.config_get("maxmemory")  # "CONFIG GET" as two words
    assert pack_command(b"CLIENT SETNAME", "x") == pack_command("CLIENT", "SETNAME", "x")
    assert pack_command("SET", "k", 1) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n"
    with pytest.raises(DataError, match="values must be str"):
        pack_command("SET", "k", object())
