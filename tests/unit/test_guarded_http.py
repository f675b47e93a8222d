"""The SSRF guard for httpx clients (agent_core.guarded_http): every connection goes to a
checked address only, whatever name or spelling the URL uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from agent_core import guarded_client
from agent_core.guarded_http import GuardedTransport


@pytest.fixture
async def local_http() -> AsyncIterator[int]:
    """A tiny HTTP server on loopback that answers 200 "ok"; its port."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "2130706433", "0x7f000001",
                                  "[::1]", "[::ffff:127.0.0.1]"])
async def test_loopback_in_any_spelling_is_refused(local_http: int, host: str) -> None:
    async with guarded_client() as client:
        with pytest.raises(httpx.ConnectError, match=r"refused|resolve"):
            await client.get(f"http://{host}:{local_http}/")


async def test_an_internal_host_the_deployment_trusts_is_reached(local_http: int) -> None:
    async with guarded_client(internal_ok=["127.0.0.1"]) as client:
        response = await client.get(f"http://127.0.0.1:{local_http}/")
    assert response.text == "ok"


async def test_a_name_is_checked_where_it_resolves_to() -> None:
    async def metadata(host: str, port: int) -> list[str]:
        return ["169.254.169.254"]

    transport = GuardedTransport(resolver=metadata)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError, match="link-local"):
            await client.get("http://agents.example.com/.well-known/agent-card.json")


async def test_no_redirect_is_followed_by_itself(local_http: int) -> None:
    async with guarded_client(internal_ok=["127.0.0.1"]) as client:
        assert client.follow_redirects is False
