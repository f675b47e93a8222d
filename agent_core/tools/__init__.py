"""Tools: the @tool decorator, registries, and the executor with its policies."""

from ._schema import ArgumentError
from .context import ToolContext
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
    require_confirmation,
    validate_arguments,
)
from .policies import BreakerBoard, CircuitBreaker, TaskFailures
from .registry import Tool, ToolRegistry, tool

__all__ = [
    "ArgumentError",
    "BreakerBoard",
    "CircuitBreaker",
    "CircuitBreakerPolicy",
    "Invocation",
    "RetryPolicy",
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
    "require_confirmation",
    "tool",
    "validate_arguments",
]
