"""The agent hub: agents that work together over NATS JetStream, speaking HMP v1.

``messages`` holds the six message types and their rules, ``bus`` the JetStream
connection (streams, subjects, headers), ``agent`` the plugin base and its runner,
``discovery`` heartbeats and who can do what, ``deadlines`` the watch that answers
TIMEOUT, ``delegation`` the Delegation the gateway's agent uses, ``loop_agent`` a TaskLoop
as an agent, ``server`` the embedded nats-server, ``settings`` the hub's settings. What
needs nats-py, and the message models, are imported when first used (the gateway reads
HubSettings whether or not the hub is enabled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import lazy_exports

from .settings import HubSettings

if TYPE_CHECKING:
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

__getattr__ = lazy_exports(__name__, {
    "Agent": "agent", "AgentRunner": "agent", "Bus": "bus", "Headers": "bus",
    "EmbeddedNats": "server", **dict.fromkeys((
        "ContextUpdate", "Heartbeat", "LogEvent", "Message", "TaskRequest", "TaskResponse",
        "ToolCall", "Violation", "parse", "schemas"), "messages")})
