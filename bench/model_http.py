"""CPU per model request: httpx's own pool against the aiohttp transport the adapters use.

Posts a chat-sized JSON body to a local aiohttp server at several concurrency levels
through ``ModelHTTP`` (the adapters' client) with each transport, and prints the CPU per
request of the whole process (client and the same local server in both columns) and the
ratio.

    .venv/bin/python bench/model_http.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
from typing import Any

import httpx
from aiohttp import web

from agent_core.messages import Message
from agent_core.models import ModelRequest
from agent_core.models._http import ModelHTTP
from agent_core.models._transport import AiohttpTransport

BODY = {"model": "m", "messages": [{"role": "user", "content": "how are sales " * 40}] * 10}
REQUEST = ModelRequest(messages=[Message(role="user", content="x")])


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(http: ModelHTTP, concurrency: int, total: int) -> float:
    """CPU seconds (client + server, one process) per request."""

    async def worker(n: int) -> None:
        for _ in range(n):
            await http.post_json("/chat", BODY, REQUEST)

    await worker(20)  # warm the pool
    before = cpu()
    await asyncio.gather(*(worker(total // concurrency) for _ in range(concurrency)))
    return (cpu() - before) / total


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
    transports: dict[str, Any] = {
        "httpx pool": lambda: httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50)),
        "aiohttp transport": lambda: AiohttpTransport(max_connections=200),
    }
    print(f"CPU per model request (client + local server, {total} requests per cell; "
          "median of 3):")
    for concurrency in (1, 10, 50, 200):
        cells = {}
        for name, make in transports.items():
            runs = []
            for _ in range(3):
                http = ModelHTTP(provider="bench", base_url=url, headers={}, timeout=30,
                                 max_retries=0, transport=make())
                runs.append(await run(http, concurrency, total))
                await http.aclose()
            cells[name] = statistics.median(runs)
        ratio = cells["httpx pool"] / cells["aiohttp transport"]
        print(f"  concurrency {concurrency:3d}: " + "   ".join(
            f"{name} {value * 1000:6.3f} ms" for name, value in cells.items())
            + f"   ratio {ratio:4.1f}x")
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    asyncio.run(main(parser.parse_args().requests))
