"""An MCP server (the SDK's MCPServer, over stdio) whose tool list changes while it runs:
calling ``add_late`` adds the tool ``late`` and announces it; ``remove_late`` removes it."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("changing")
READ = ToolAnnotations(read_only_hint=True)


def late() -> str:
    """A tool that exists only after add_late."""
    return "late answer"


@server.tool(annotations=READ)
async def add_late(ctx: Context) -> str:
    """Add the tool 'late'."""
    server.add_tool(late, name="late", annotations=READ)
    await ctx.notify_tools_changed()
    return "added"


@server.tool(annotations=READ)
async def remove_late(ctx: Context) -> str:
    """Remove the tool 'late'."""
    server.remove_tool("late")
    await ctx.notify_tools_changed()
    return "removed"


if __name__ == "__main__":
    server.run()
