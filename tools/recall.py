"""recall: search this conversation's archived messages (its long-term memory)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

from pydantic import Field

from agent_core import ToolContext, ToolError, tool
from agent_core.store.search import query_terms

_SNIPPET = 320


@tool
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
            "snippet": snippet(h.content, query),
        } for h in hits],
    }


def snippet(text: str, query: str, size: int = _SNIPPET) -> str:
    """The part of ``text`` around the first query term, about ``size`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= size:
        return flat
    lowered = flat.lower()
    positions = [lowered.find(t) for t in query_terms(query)]
    found = [p for p in positions if p >= 0]
    centre = min(found) if found else 0
    start = max(0, min(centre - size // 3, len(flat) - size))
    piece = flat[start:start + size]
    piece = re.sub(r"^\S*\s", "", piece) if start else piece
    return ("…" if start else "") + piece + ("…" if start + size < len(flat) else "")
