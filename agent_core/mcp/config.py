"""How one MCP server is reached and which of its tools are used.

Configured by name in ``HERMES_MCP_SERVERS`` (a JSON object) or under ``mcp_servers:`` in
the YAML settings file::

    mcp_servers:
      time:
        command: mcp-server-time
      files:
        command: npx
        args: ["-y", "@modelcontextprotocol/server-filesystem", "{sandbox}"]
        sandbox: true                  # one session per task sandbox, its root
      crm:
        url: https://crm.example.com/mcp
        headers: {Authorization: "Bearer ..."}   # a secret: never logged
        include: ["search_*", "get_*"]
        permissions: {get_invoice: read}
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

#: A server's name prefixes its tools' names (``time__get_current_time``).
SERVER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,23}$")
#: In args, env, cwd, url and headers of a ``sandbox: true`` server: the task's sandbox.
SANDBOX = "{sandbox}"

Permission = Literal["read", "write"]


class McpServerConfig(BaseModel):
    """One server: ``command`` (stdio, a subprocess) or ``url`` (Streamable HTTP)."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, SecretStr] = Field(default_factory=dict)
    cwd: Path | None = None
    url: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    #: Shell-style patterns on the server's own tool names; empty: every tool.
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    #: Overrides of what the tool annotations say: {tool name or pattern: read|write}.
    permissions: dict[str, Permission] = Field(default_factory=dict)
    call_timeout: float = Field(60.0, gt=0)
    connect_timeout: float = Field(20.0, gt=0)
    #: Seconds between pings that notice a server that hangs or went away.
    ping_interval: float = Field(15.0, gt=0)
    #: Longest wait between restarts of a server that failed (it doubles from 1 s).
    max_backoff: float = Field(30.0, gt=0)
    #: One session per task sandbox, whose directory is the session's MCP root (and
    #: replaces ``{sandbox}``); for servers that act on files.
    sandbox: bool = False
    #: Sandbox sessions kept open at once; the least recently used closes first.
    max_sessions: int = Field(8, ge=1, le=256)
    #: A sandbox session unused this long is closed.
    idle_seconds: float = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (Streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd are for command servers, not url ones")
        if self.command is not None and self.headers:
            raise ValueError("headers are for url servers, not command ones")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """How the server is reached."""
        return "stdio" if self.command is not None else "http"

    def wants(self, tool: str) -> bool:
        """Whether the include/exclude filters keep the server's tool ``tool``."""
        if self.include and not any(fnmatch.fnmatchcase(tool, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(tool, p) for p in self.exclude)

    def permission_of(self, tool: str, *, read_only_hint: bool | None) -> Permission:
        """read or write: an override when one matches, else the tool's own hint; a tool
        without ``readOnlyHint: true`` is a write (fail closed)."""
        if tool in self.permissions:
            return self.permissions[tool]
        for pattern, permission in self.permissions.items():
            if fnmatch.fnmatchcase(tool, pattern):
                return permission
        return "read" if read_only_hint is True else "write"


def check_servers(servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
    """The servers, or ValueError naming a bad server name."""
    for name in servers:
        if not SERVER_NAME.match(name) or "--" in name:
            raise ValueError(f"MCP server name {name!r}: use 1-24 letters, digits and single "
                             "'-', starting with a letter (it prefixes the tool names)")
    return servers
