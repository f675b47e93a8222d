"""recall: search this conversation's archived messages (its long-term memory)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from pydantic import Field

from agent_core import ToolContext, ToolError, tool


@tool(tags={"private"})
async def recall(query: str, limit: Annotated[int, Field(ge=1, le=20)] = 5,
                 ctx: ToolContext | None = None) -> dict[str, Any]:
    """Search this conversation's older messages that are no longer in view.

    Use it when the user refers to something said earlier that you cannot see.

    Args:
        query: Keywords to look for: names, numbers, topics.
        limit: How many snippets to return.
    """
    if ctx is None or ctx.memory is None:
        raise ToolError("no conversation memory is available here")
    hits = await ctx.memory.recall(query, limit)
    return {
        "query": query,
        "found": len(hits),
        "results": [{
            "when": dt.datetime.fromtimestamp(h.ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "round": h.round,
            "from": h.role,
            "snippet": h.excerpt(query),
        } for h in hits],
    }
