"""hermes agent runtime: a controllable, observable tool-calling loop.

Settings (pydantic-settings) are imported when first used: a process handed its settings,
or needing none, does not load them; aiohttp, redis-py and frozenlist, imported after
it, skip what they need not do as they are imported (``agent_core.lean``)."""

from typing import TYPE_CHECKING

from . import lean
from ._tls import tls_client_context
from .decisions import DECISION_TYPES, AgentDecision, DecisionType
from .errors import (
    AddressRefused,
    AgentDeadlineError,
    AgentLoopLimitError,
    ApprovalRequired,
    ConfigError,
    HermesError,
    ModelError,
    RuntimeFailure,
    Signal,
    StoreUnavailableError,
    ToolError,
)
from .events import Event, EventBus, EventType
from .exports import lazy_exports
from .ids import new_id
from .loop import Approval, LoopConfig, TaskLoop
from .messages import Message, ToolCall
from .parser import DecisionParser
from .report import TaskReport
from .task import (
    PAUSED,
    TERMINAL,
    TaskControl,
    TaskRequest,
    TaskResult,
    TaskState,
    TaskStatus,
)
from .tools import (
    Delegated,
    Sandbox,
    Services,
    Tool,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    tool,
)

__all__ = [
    "DECISION_TYPES",
    "PAUSED",
    "TERMINAL",
    "AddressRefused",
    "AgentDeadlineError",
    "AgentDecision",
    "AgentLoopLimitError",
    "Approval",
    "ApprovalRequired",
    "ConfigError",
    "DecisionParser",
    "DecisionType",
    "Delegated",
    "EnvProxies",
    "Event",
    "EventBus",
    "EventType",
    "FileLock",
    "GuardedResolver",
    "GuardedTransport",
    "HermesError",
    "LoopConfig",
    "Message",
    "ModelError",
    "PinnedResolver",
    "ResolutionRefused",
    "RuntimeFailure",
    "Sandbox",
    "Services",
    "Settings",
    "Signal",
    "SsrfResolver",
    "StoreUnavailableError",
    "TaskControl",
    "TaskLoop",
    "TaskReport",
    "TaskRequest",
    "TaskResult",
    "TaskState",
    "TaskStatus",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolExecutor",
    "ToolRegistry",
    "ToolResult",
    "Vetted",
    "check_url",
    "guarded_client",
    "lazy_exports",
    "load_settings",
    "new_id",
    "system_resolver",
    "tls_client_context",
    "tool",
    "vet_url",
]

if TYPE_CHECKING:
    from .filelock import FileLock
    from .guarded_http import GuardedTransport, guarded_client
    from .models._transport import EnvProxies
    from .settings import Settings, load_settings
    from .ssrf import (
        GuardedResolver,
        PinnedResolver,
        ResolutionRefused,
        Vetted,
        check_url,
        system_resolver,
        vet_url,
    )
    from .ssrf import Resolver as SsrfResolver

__getattr__ = lazy_exports(__name__, {"Settings": "settings", "load_settings": "settings",
                                      "FileLock": "filelock",
                                      "EnvProxies": "models._transport",
                                      "GuardedTransport": "guarded_http",
                                      "guarded_client": "guarded_http",
                                      **dict.fromkeys(("GuardedResolver", "PinnedResolver",
                                                       "ResolutionRefused", "Vetted",
                                                       "check_url",
                                                       "system_resolver", "vet_url"),
                                                      "ssrf")})

# Reading the CA bundle (aiohttp), importing OpenTelemetry's metrics SDK (redis-py),
# loading libstdc++ (frozenlist), when they are imported later: agent_core.lean.
lean.install()
