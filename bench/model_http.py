"""CPU per model request: the adapters' client against httpx and a bare aiohttp loop.

Posts a chat-sized JSON body to a local aiohttp server at several concurrency levels and
prints the CPU per request of the whole process (client and the same local server in
every column):

- ``httpx``: an ``httpx.AsyncClient`` with its own pool (httpcore), posting ``json=``;
- ``ModelHTTP``: the adapters' client (``agent_core/models/_http.py``: aiohttp, the retry
  and error rules, the body decoded);
- ``bare aiohttp``: one ``ClientSession``, ``post`` and ``json.loads`` of the body: the
  floor; the last column is what ModelHTTP adds over it.

    .venv/bin/python bench/model_http.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import httpx
from aiohttp import web

from agent_core.messages import Message
from agent_core.models import ModelRequest
from agent_core.models._http import ModelHTTP

BODY = {"model": "m", "messages": [{"role": "user", "content": "how are sales " * 40}] * 10}
REQUEST = ModelRequest(messages=[Message(role="user", content="x")])
Post = Callable[[], Awaitable[Any]]


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(post: Post, concurrency: int, total: int) -> float:
    """CPU seconds (client + server, one process) per request."""

    async def worker(n: int) -> None:
        for _ in range(n):
            await post()

    await worker(20)  # warm the pool
    before = cpu()
    await asyncio.gather(*(worker(total // concurrency) for _ in range(concurrency)))
    return (cpu() - before) / total


@contextlib.asynccontextmanager
async def with_httpx(url: str) -> AsyncIterator[Post]:
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=httpx.Limits(
            max_connections=200, max_keepalive_connections=50)) as client:
        async def post() -> Any:
            response = await client.post("/chat", json=BODY)
            return response.json()
        yield post


@contextlib.asynccontextmanager
async def with_model_http(url: str) -> AsyncIterator[Post]:
    http = ModelHTTP(provider="bench", base_url=url, headers={}, timeout=30, max_retries=0)
    try:
        yield lambda: http.post_json("/chat", BODY, REQUEST)
    finally:
        await http.aclose()


@contextlib.asynccontextmanager
async def with_aiohttp(url: str) -> AsyncIterator[Post]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as session:
        async def post() -> Any:
            async with session.post(f"{url}/chat", data=json.dumps(BODY).encode(),
                                    headers={"Content-Type": "application/json"}) as r:
                return json.loads(await r.read())
        yield post


async def main(total: int) -> None:
    answer = {"choices": [{"message": {"role": "assistant", "content": "fine " * 50}}]}

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/v1/chat", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    clients = {"httpx": with_httpx, "ModelHTTP": with_model_http, "bare aiohttp": with_aiohttp}
    print(f"CPU per model request (client + local server, {total} requests per cell; "
          "median of 3):")
    for concurrency in (1, 10, 50, 200):
        cells = {}
        for name, make in clients.items():
            runs = []
            for _ in range(3):
                async with make(url) as post:
                    runs.append(await run(post, concurrency, total))
            cells[name] = statistics.median(runs)
        added = cells["ModelHTTP"] - cells["bare aiohttp"]
        print(f"  concurrency {concurrency:3d}: " + "   ".join(
            f"{name} {value * 1000:6.3f} ms" for name, value in cells.items())
            + f"   ModelHTTP adds {added * 1000:+6.3f} ms,"
            f" httpx/ModelHTTP {cells['httpx'] / cells['ModelHTTP']:4.1f}x")
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    asyncio.run(main(parser.parse_args().requests))
