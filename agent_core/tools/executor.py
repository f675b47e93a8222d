"""ToolExecutor: runs one tool call through a chain of policies and always returns a result.

Each policy is a middleware with one shared signature, wrapping the next like starlette
middleware wraps an app::

    permission -> arguments -> confirmation -> circuit breaker -> retry -> timeout -> tool

A tool's exception, a timeout, a validation failure or a denial becomes a structured
ToolResult the model can read; only ``ApprovalRequired`` (a signal, not an error) propagates,
so the loop can pause the task.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .. import tracing
from ..errors import ApprovalRequired, ToolError
from ..redaction import redact
from ._schema import ArgumentError
from .context import ToolContext
from .policies import BreakerBoard, TaskFailures
from .registry import Tool, ToolRegistry

log = logging.getLogger(__name__)

ErrorType = Literal[
    "not_found", "validation", "permission", "timeout", "exception", "unavailable",
    "circuit_open", "rejected", "interrupted",
]


@dataclass(slots=True)
class ToolErrorInfo:
    """Why a tool call failed, in words the model can act on."""

    type: ErrorType
    message: str
    retryable: bool = False


@dataclass(slots=True)
class ToolResult:
    """The outcome of one tool call."""

    tool_name: str
    call_id: str | None
    ok: bool
    output: Any = None
    error: ToolErrorInfo | None = None
    duration: float = 0.0
    hint: str | None = None
    attempts: int = 1

    def observation(self) -> str:
        """The text fed back to the model."""
        if self.ok:
            text = self.output if isinstance(self.output, str) else json.dumps(
                self.output, ensure_ascii=False, default=str)
            return redact(text)
        assert self.error is not None
        body: dict[str, Any] = {"error": self.error.type, "message": self.error.message}
        if self.hint:
            body["hint"] = self.hint
        return redact(json.dumps(body, ensure_ascii=False))

    @classmethod
    def failure(cls, tool_name: str, call_id: str | None, type_: ErrorType, message: str,
                *, retryable: bool = False) -> ToolResult:
        """A failed result."""
        return cls(tool_name, call_id, False,
                   error=ToolErrorInfo(type_, redact(message), retryable))


@dataclass(slots=True)
class Invocation:
    """One tool call travelling down the middleware chain."""

    tool: Tool
    arguments: dict[str, Any]
    ctx: ToolContext
    call_id: str | None = None
    #: Set when a human approved this exact call; the confirmation gate lets it through.
    approved: bool = False
    attempts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


Next = Callable[[Invocation], Awaitable[ToolResult]]


class ToolMiddleware(Protocol):
    """A policy wrapped around a tool call."""

    async def __call__(self, inv: Invocation, call_next: Next) -> ToolResult: ...


# --- the standard policies -----------------------------------------------------------------


async def check_permission(inv: Invocation, call_next: Next) -> ToolResult:
    """Refuse a caller who lacks the tool's required permission."""
    needed = inv.tool.required_permission
    if not inv.ctx.allows(needed):
        return ToolResult.failure(
            inv.tool.name, inv.call_id, "permission",
            f"the user's role {inv.ctx.role!r} lacks the {needed!r} permission that "
            f"{inv.tool.name} needs; tell the user it is not allowed for them")
    return await call_next(inv)


async def validate_arguments(inv: Invocation, call_next: Next) -> ToolResult:
    """Validate and coerce the arguments; a failure names the field and what is expected."""
    try:
        inv.arguments = inv.tool.validate(inv.arguments)
    except ArgumentError as exc:
        return ToolResult.failure(inv.tool.name, inv.call_id, "validation",
                                  f"invalid arguments for {inv.tool.name}: {exc}")
    return await call_next(inv)


class CircuitBreakerPolicy:
    """Fails fast while a tool's breaker is open; feeds it every real outcome."""

    def __init__(self, board: BreakerBoard) -> None:
        self.board = board

    async def __call__(self, inv: Invocation, call_next: Next) -> ToolResult:
        breaker = self.board.for_tool(inv.tool.name)
        if not breaker.allow():
            return ToolResult.failure(
                inv.tool.name, inv.call_id, "circuit_open",
                f"{inv.tool.name} failed repeatedly and is paused for "
                f"{breaker.retry_in():.0f}s; try another approach")
        try:
            result = await call_next(inv)
        except BaseException:
            breaker.release_trial()
            raise
        if result.ok:
            breaker.record_success()
        elif result.error and result.error.type in ("exception", "timeout"):
            breaker.record_failure()
        else:
            breaker.release_trial()
        return result


class RetryPolicy:
    """Retries transient failures (timeouts, ToolError(retryable=True)) up to tool.retries
    times, with exponential backoff."""

    def __init__(self, *, base_delay: float = 0.2, max_delay: float = 5.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay

    async def __call__(self, inv: Invocation, call_next: Next) -> ToolResult:
        attempt = 0
        while True:
            attempt += 1
            inv.attempts = attempt
            result = await call_next(inv)
            retryable = result.error is not None and result.error.retryable
            if result.ok or not retryable or attempt > inv.tool.retries:
                result.attempts = attempt
                return result
            delay = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
            log.info("retrying %s after %s (attempt %d)", inv.tool.name,
                     result.error.type if result.error else "?", attempt + 1)
            await asyncio.sleep(delay)


class TimeoutPolicy:
    """Abandons a call that runs past the tool's timeout (or the default)."""

    def __init__(self, default: float) -> None:
        self.default = default

    async def __call__(self, inv: Invocation, call_next: Next) -> ToolResult:
        limit = inv.tool.timeout or self.default
        try:
            async with asyncio.timeout(limit):
                return await call_next(inv)
        except TimeoutError:
            return ToolResult.failure(inv.tool.name, inv.call_id, "timeout",
                                      f"{inv.tool.name} did not finish within {limit:g}s",
                                      retryable=True)


async def call_tool(inv: Invocation) -> ToolResult:
    """The innermost step: run the function, turning any exception into a result."""
    try:
        if inv.tool.isolation == "subprocess":
            from .isolation import run_isolated

            output = await run_isolated(inv.tool, inv.arguments, inv.ctx)
        else:
            output = await inv.tool.invoke(inv.arguments, inv.ctx)
    except ToolError as exc:
        return ToolResult.failure(inv.tool.name, inv.call_id, "exception", str(exc),
                                  retryable=exc.retryable)
    except (ApprovalRequired, asyncio.CancelledError):
        raise
    except TimeoutError:
        raise  # the timeout policy owns this
    except Exception as exc:
        log.warning("tool %s raised %s: %s", inv.tool.name, type(exc).__name__, exc)
        return ToolResult.failure(inv.tool.name, inv.call_id, "exception",
                                  f"{type(exc).__name__}: {exc}")
    return ToolResult(inv.tool.name, inv.call_id, True, output=output)


def default_policies(board: BreakerBoard, *, timeout: float, rules: Any = None,
                     audit: Any = None) -> list[ToolMiddleware]:
    """The standard chain, outermost first: permission, arguments, approval, audit,
    circuit breaker, retry, timeout. ``rules`` are ApprovalRules; ``audit`` an AuditSink."""
    from .approval import ApprovalGate, AuditTrail

    chain: list[ToolMiddleware] = [check_permission, validate_arguments, ApprovalGate(rules)]
    if audit is not None:
        chain.append(AuditTrail(audit))
    return [*chain, CircuitBreakerPolicy(board), RetryPolicy(), TimeoutPolicy(timeout)]


class ToolExecutor:
    """Runs tool calls for every task of a deployment through one policy chain."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        policies: Sequence[ToolMiddleware] | None = None,
        board: BreakerBoard | None = None,
        timeout: float = 30.0,
        rules: Any = None,
        audit: Any = None,
        terminal: Next = call_tool,
    ) -> None:
        self.registry = registry
        self.board = board or BreakerBoard()
        chain = list(policies) if policies is not None else default_policies(
            self.board, timeout=timeout, rules=rules, audit=audit)
        handler = terminal
        for policy in reversed(chain):
            handler = _bind(policy, handler)
        self._handler = handler

    async def execute(
        self,
        name: str,
        arguments: dict[str, Any],
        ctx: ToolContext,
        *,
        call_id: str | None = None,
        failures: TaskFailures | None = None,
        approved: bool = False,
        approved_by: str | None = None,
    ) -> ToolResult:
        """Run one call. Returns a ToolResult; raises only ApprovalRequired and cancellation."""
        tool = self.registry.get(name)
        if tool is None:
            return ToolResult.failure(
                name, call_id, "not_found",
                f"there is no tool named {name!r}; valid tools: {', '.join(self.registry.names())}")
        failures = failures if failures is not None else TaskFailures()
        if name in failures.unavailable:
            return ToolResult.failure(name, call_id, "unavailable",
                                      f"{name} is unavailable for the rest of this task")
        started = time.perf_counter()
        inv = Invocation(tool, dict(arguments), ctx, call_id, approved or approved_by is not None)
        if approved_by is not None:
            inv.extra["approved_by"] = approved_by
        paused: ApprovalRequired | None = None
        with tracing.span(f"execute_tool {name}", {  # OpenTelemetry's GenAI conventions
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id or "", "hermes.side_effect": tool.side_effect,
                "hermes.approved": inv.approved}) as span:
            try:
                result = await self._handler(inv)
            except ApprovalRequired as signal:  # a pause, not a failure of the span
                span.set_attribute("hermes.approval_required", True)
                paused = signal
            else:
                span.set_attribute("hermes.ok", result.ok)
                if result.error is not None:
                    span.fail(result.error.type)
        if paused is not None:
            raise paused
        result.duration = time.perf_counter() - started
        result.call_id = call_id
        if result.ok:
            failures.record_success(name)
        elif result.error and result.error.type in ("exception", "timeout"):
            now_unavailable, hint = failures.record_failure(name, arguments, result.error.message)
            result.hint = hint
            if now_unavailable:
                log.warning("tool %s withdrawn for this task after repeated failures", name)
        return result


def _bind(policy: ToolMiddleware, call_next: Next) -> Next:
    async def handler(inv: Invocation) -> ToolResult:
        return await policy(inv, call_next)

    return handler
