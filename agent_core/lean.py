"""What a long-running process should not import."""

from __future__ import annotations

import sys
import types
from typing import Any


def skip_httpx_cli() -> None:
    """Keep httpx from importing its command-line client.

    ``import httpx`` imports ``httpx._main`` (rich, click, pygments: ~80 modules, ~4 MB of
    memory and ~100 ms here) whenever click is installed, and the MCP SDK brings click (its
    uvicorn needs it). python-telegram-bot, the MCP SDK and a2a-sdk import httpx; none of
    them, nor we, call its command line. The console script calls this before anything
    imports httpx; ``httpx.main`` then says to run the ``httpx`` command instead."""
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    module = types.ModuleType("httpx._main", "httpx's command line, not loaded here")

    def main(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("httpx's command line is not loaded in this process "
                           "(agent_core.lean.skip_httpx_cli); run the httpx command")

    module.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = module
