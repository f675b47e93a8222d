"""Tools from Model Context Protocol servers (stdio and Streamable HTTP), through the
official ``mcp`` SDK. Nothing of the SDK is imported until a server is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..exports import lazy_exports
from .config import McpServerConfig

if TYPE_CHECKING:
    from .servers import McpServers

__all__ = ["McpServerConfig", "McpServers"]

__getattr__ = lazy_exports(__name__, {"McpServers": "servers"})
