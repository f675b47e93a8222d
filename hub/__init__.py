"""The agent hub: agents that work together over NATS JetStream, speaking HMP v1.

``messages`` holds the six message types and their rules, ``bus`` the JetStream
connection (streams, subjects, headers), ``agent`` the plugin base and its runner,
``server`` the embedded nats-server, ``settings`` the hub's section of the settings.
"""

from __future__ import annotations

from .agent import Agent, AgentRunner
from .bus import Bus, Headers
from .messages import (
    ContextUpdate,
    Heartbeat,
    LogEvent,
    Message,
    TaskRequest,
    TaskResponse,
    ToolCall,
    Violation,
    parse,
    schemas,
)
from .server import EmbeddedNats
from .settings import HubSettings

__all__ = [
    "Agent",
    "AgentRunner",
    "Bus",
    "ContextUpdate",
    "EmbeddedNats",
    "Headers",
    "Heartbeat",
    "HubSettings",
    "LogEvent",
    "Message",
    "TaskRequest",
    "TaskResponse",
    "ToolCall",
    "Violation",
    "parse",
    "schemas",
]
