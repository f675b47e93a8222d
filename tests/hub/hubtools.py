"""Tools the hub's tool-service tests allowlist (HERMES_TOOLS=tests.hub.hubtools)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agent_core.tools import ToolContext, tool

#: Every call that ran, as (the caller's user id, the amount): what ran, and as whom.
CALLS: list[tuple[str, int]] = []


@tool
async def double(amount: Annotated[int, Field(ge=0, le=1000)],
                 ctx: ToolContext | None = None) -> dict[str, int]:
    """Double an amount."""
    CALLS.append((ctx.user_id if ctx else "?", amount))
    return {"doubled": amount * 2}


@tool
async def explode() -> str:
    """Fail with an exception carrying a credential-shaped text."""
    raise RuntimeError(f"upstream refused key {SECRET}")


#: Shaped like an API key: redacted wherever it would be shown.
SECRET = "sk-" + "hubtoolsecret" * 3


@tool(side_effect="write")
async def erase(path: str) -> str:
    """Erase a file (a write: it needs a human's approval)."""
    CALLS.append(("erase", 0))
    return f"erased {path}"


@tool
async def forbidden() -> str:
    """Registered, but never allowlisted."""
    CALLS.append(("forbidden", 0))
    return "ran"
