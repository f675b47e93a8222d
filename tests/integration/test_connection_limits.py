"""``serve`` bounds what a client can hold with raw connections: a request head trickled in
byte by byte is cut off after HERMES_HEADER_TIMEOUT (408) while other requests are served,
idle connections beyond HERMES_MAX_CONNECTIONS are closed oldest first to make room, and
with every connection busy a new one gets 503 until one frees."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agent_core.models.replay import ReplayModelServer
from tests.integration.conftest import answer_echo
from tests.integration.test_serve import Serve

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@pytest.fixture
async def model() -> AsyncIterator[ReplayModelServer]:
    server = ReplayModelServer(responder=answer_echo)
    await server.start()
    yield server
    await server.stop()


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, model: ReplayModelServer, **env: str
                  ) -> AsyncIterator[Serve]:
    gateway = Serve(tmp_path, model, **env)
    try:
        async with aiohttp.ClientSession() as http:
            await gateway.ready(http)
        yield gateway
        assert await gateway.stop() == 0, gateway.log.read_text()
    finally:
        gateway.kill()


async def healthz(gateway: Serve) -> int:
    async with aiohttp.ClientSession() as fresh, fresh.get(f"{gateway.base}/healthz") as r:
        return r.status


async def closed_by_server(stream: Stream) -> bytes:
    """What the server sent before it closed the connection."""
    return await stream[0].read()


async def close_all(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@pytest.mark.timeout(60)
async def test_a_head_trickled_in_is_cut_off_while_others_are_served(
        tmp_path: Path, model: ReplayModelServer) -> None:
    async with serving(tmp_path, model, HERMES_HEADER_TIMEOUT="1") as gateway:
        stream = await asyncio.open_connection("127.0.0.1", gateway.port)
        head = (f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
                f"X-Padding: {'a' * 500}\r\n\r\n")

        async def trickle() -> None:  # a byte every 20 ms: the whole head would take 10 s
            with contextlib.suppress(OSError):
                for byte in head.encode():
                    stream[1].write(bytes([byte]))
                    await stream[1].drain()
                    await asyncio.sleep(0.02)

        began = time.monotonic()
        slow = asyncio.create_task(trickle())
        try:
            assert await healthz(gateway) == 200, "others are served meanwhile"
            answer = await asyncio.wait_for(closed_by_server(stream), 10)
            took = time.monotonic() - began
        finally:
            slow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await slow
            await close_all([stream])
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert 0.9 < took < 5, took
        assert await healthz(gateway) == 200


@pytest.mark.timeout(60)
async def test_idle_connections_past_the_cap_are_closed_oldest_first(
        tmp_path: Path, model: ReplayModelServer) -> None:
    async with serving(tmp_path, model, HERMES_MAX_CONNECTIONS="6") as gateway:
        idle = [await asyncio.open_connection("127.0.0.1", gateway.port) for _ in range(20)]
        try:
            closed = await asyncio.wait_for(
                asyncio.gather(*(closed_by_server(s) for s in idle[:14])), 10)
            assert closed == [b""] * 14, "the oldest fourteen made room, without a word"
            assert await healthz(gateway) == 200, "a request finds room too"
        finally:
            await close_all(idle)


@pytest.mark.timeout(60)
async def test_with_every_connection_busy_a_new_one_gets_503_until_one_frees(
        tmp_path: Path, model: ReplayModelServer) -> None:
    async with serving(tmp_path, model, HERMES_MAX_CONNECTIONS="6") as gateway:
        busy: list[Stream] = []
        try:
            for _ in range(6):  # a webhook whose body never comes: its handler waits on it
                stream = await asyncio.open_connection("127.0.0.1", gateway.port)
                stream[1].write(
                    f"POST /webhook/crm HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 40\r\n"
                    "Expect: 100-continue\r\n\r\n".encode())
                assert (await asyncio.wait_for(stream[0].readline(), 10)).startswith(
                    b"HTTP/1.1 100 "), "its handler is reading the body"
                busy.append(stream)
            extra = await asyncio.open_connection("127.0.0.1", gateway.port)
            busy.append(extra)  # closed with the others, whatever happens
            refused = await asyncio.wait_for(closed_by_server(extra), 10)
            assert refused.startswith(b"HTTP/1.1 503 "), refused
            assert b"too many connections" in refused
            await close_all(busy[:1])
            async with asyncio.timeout(10):  # once the server has seen it go
                while True:
                    with contextlib.suppress(aiohttp.ClientError):
                        if await healthz(gateway) == 200:
                            break
                    await asyncio.sleep(0.05)
        finally:
            await close_all(busy)
