"""An MCP server's tool as a runtime Tool: prefixed name, the server's JSON Schema, a read
or write permission from its annotations, and a function that calls the server."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from ..errors import ToolDefinitionError
from ..tools import Tool, ToolContext, tool
from .config import McpServerConfig
from .results import convert, deliver
from .session import McpSession

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: Seconds the runtime's timeout waits beyond the server's call timeout, so that the SDK's
#: own timeout (which tells the server to stop) is the one that fires.
_TIMEOUT_MARGIN = 5.0

#: The session a call of a server's tool goes to (a sandboxed server's depends on the task).
SessionFor = Callable[[ToolContext], Awaitable[McpSession]]


def tool_name(server: str, name: str) -> str:
    """``<server>__<tool>``, made of the characters models accept, at most 64 of them."""
    safe = f"{server}__{_UNSAFE.sub('_', name)}"
    if len(safe) <= 64 and safe == f"{server}__{name}":
        return safe
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{safe[:57]}-{digest}"


def build_tool(server: str, config: McpServerConfig, spec: types.Tool,
               session_for: SessionFor) -> Tool | None:
    """The runtime Tool for ``spec``, or None (logged) when its schema cannot be used."""
    name = tool_name(server, spec.name)
    hints = spec.annotations
    permission = config.permission_of(spec.name, read_only_hint=hints.read_only_hint
                                      if hints else None)
    tags = {"mcp"}
    if hints is not None and hints.destructive_hint and permission == "write":
        tags.add("destructive")
    description = (spec.description or (hints.title if hints else None) or spec.title
                   or f"{spec.name} from the {server} MCP server")
    remote = spec.name

    async def call(_mcp_ctx: ToolContext, **arguments: Any) -> Any:
        session = await session_for(_mcp_ctx)

        async def report(progress: float, total: float | None, message: str | None) -> None:
            amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            _mcp_ctx.report(f"{message} ({amount})" if message else amount)

        result = await session.call(remote, arguments, progress=report)
        return deliver(convert(result, tool=name), _mcp_ctx)

    try:
        return tool(name=name, description=description, schema=_object_schema(spec),
                    side_effect=permission, timeout=config.call_timeout + _TIMEOUT_MARGIN,
                    tags=tags)(call)
    except ToolDefinitionError as exc:
        log.warning("MCP server %s: tool %s left out: %s", server, spec.name, exc)
        return None


def _object_schema(spec: types.Tool) -> dict[str, Any]:
    schema = dict(spec.input_schema or {})
    if not schema or schema == {"type": "object"}:
        return {"type": "object", "properties": {}}
    return schema
