"""A gateway process for the worker-death test: prints its port, then serves until killed."""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web

from agent_core import load_settings
from gateway.app import create_app
from gateway.settings import GatewaySettings


async def main() -> None:
    app = create_app(load_settings(GatewaySettings))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
