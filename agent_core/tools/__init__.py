"""Tools: the @tool decorator, registries, and the executor with its policies."""

from ._schema import ArgumentError
from .approval import ApprovalGate, ApprovalRules, AuditSink, AuditTrail
from .context import (
    ConversationMemory,
    Delegated,
    Delegation,
    Scheduling,
    Services,
    ToolContext,
)
from .executor import (
    CircuitBreakerPolicy,
    Invocation,
    RetryPolicy,
    TimeoutPolicy,
    ToolErrorInfo,
    ToolExecutor,
    ToolMiddleware,
    ToolResult,
    check_permission,
    default_policies,
    validate_arguments,
)
from .policies import BreakerBoard, CircuitBreaker, TaskFailures
from .registry import Tool, ToolRegistry, tool
from .sandbox import Sandbox, SandboxLimits

__all__ = [
    "ApprovalGate",
    "ApprovalRules",
    "ArgumentError",
    "AuditSink",
    "AuditTrail",
    "BreakerBoard",
    "CircuitBreaker",
    "CircuitBreakerPolicy",
    "ConversationMemory",
    "Delegated",
    "Delegation",
    "Invocation",
    "RetryPolicy",
    "Sandbox",
    "SandboxLimits",
    "Scheduling",
    "Services",
    "TaskFailures",
    "TimeoutPolicy",
    "Tool",
    "ToolContext",
    "ToolErrorInfo",
    "ToolExecutor",
    "ToolMiddleware",
    "ToolRegistry",
    "ToolResult",
    "check_permission",
    "default_policies",
    "tool",
    "validate_arguments",
]
