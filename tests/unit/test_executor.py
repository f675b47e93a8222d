"""ToolExecutor: exceptions, timeouts, retries, the per-task failure memory, the breaker."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agent_core import ToolContext, ToolError, ToolExecutor, ToolRegistry, tool
from agent_core.errors import ApprovalRequired
from agent_core.tools import ApprovalRules, BreakerBoard, CircuitBreaker, TaskFailures

CTX = ToolContext(user_id="u", conversation_id="c", trace_id="t", permissions=frozenset(
    {"read", "write"}))
ADMIN = ToolContext(user_id="a", conversation_id="c", trace_id="t", role="admin",
                    permissions=frozenset({"*"}))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(*tools: object, **kw: object) -> ToolExecutor:
    return ToolExecutor(ToolRegistry(tools), **kw)  # type: ignore[arg-type]


async def test_an_exception_becomes_a_structured_error() -> None:
    @tool
    def boom(x: int) -> int:
        """Fails."""
        raise KeyError("missing row")

    result = await make(boom).execute("boom", {"x": 1}, CTX, call_id="c1")
    assert not result.ok and result.error is not None
    assert result.error.type == "exception"
    assert "KeyError" in result.error.message and "missing row" in result.error.message
    body = json.loads(result.observation())
    assert body["error"] == "exception" and result.call_id == "c1"


async def test_tool_error_message_reaches_the_model_as_written() -> None:
    @tool
    def careful(x: int) -> int:
        """Fails cleanly."""
        raise ToolError("x must be even")

    result = await make(careful).execute("careful", {"x": 1}, CTX)
    assert result.error is not None and result.error.message == "x must be even"


async def test_a_slow_tool_times_out_and_is_retried_once_when_read_only() -> None:
    calls = 0

    @tool(timeout=0.05)
    async def slow() -> str:
        """Sleeps."""
        nonlocal calls
        calls += 1
        await asyncio.sleep(5)
        return "never"

    result = await make(slow).execute("slow", {}, CTX)
    assert result.error is not None and result.error.type == "timeout"
    assert calls == 2 and result.attempts == 2, "read tools get one automatic retry"


async def test_write_tools_are_never_retried_automatically() -> None:
    calls = 0

    @tool(side_effect="write", timeout=0.05)
    async def slow_write() -> str:
        """Sleeps."""
        nonlocal calls
        calls += 1
        await asyncio.sleep(5)
        return "never"

    result = await make(slow_write).execute("slow_write", {}, ADMIN, approved=True)
    assert result.error is not None and result.error.type == "timeout" and calls == 1


async def test_transient_failure_then_success_is_retried() -> None:
    calls = 0

    @tool(retries=2)
    def flaky() -> str:
        """Fails once."""
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ToolError("busy", retryable=True)
        return "ok"

    result = await make(flaky).execute("flaky", {}, CTX)
    assert result.ok and result.output == "ok" and result.attempts == 2


async def test_same_failure_three_times_withdraws_the_tool_for_the_task() -> None:
    calls = 0

    @tool(retries=0)
    def broken(x: int) -> int:
        """Always fails."""
        nonlocal calls
        calls += 1
        raise ToolError("database is read-only")

    executor = make(broken)
    failures = TaskFailures()
    first = await executor.execute("broken", {"x": 1}, CTX, failures=failures)
    assert first.hint is None
    second = await executor.execute("broken", {"x": 1}, CTX, failures=failures)
    assert second.hint is not None and "may be unavailable" in second.hint
    third = await executor.execute("broken", {"x": 1}, CTX, failures=failures)
    assert third.hint is not None and "unavailable for the rest of this task" in third.hint
    fourth = await executor.execute("broken", {"x": 2}, CTX, failures=failures)
    assert fourth.error is not None and fourth.error.type == "unavailable"
    assert calls == 3, "a withdrawn tool is not called again"
    other_task = await executor.execute("broken", {"x": 1}, CTX, failures=TaskFailures())
    assert other_task.error is not None and other_task.error.type == "exception"


async def test_a_success_resets_the_consecutive_failure_hint() -> None:
    state = {"fail": True}

    @tool(retries=0)
    def sometimes(x: int) -> int:
        """Fails when told."""
        if state["fail"]:
            raise ToolError(f"bad {x}")
        return x

    executor, failures = make(sometimes), TaskFailures()
    await executor.execute("sometimes", {"x": 1}, CTX, failures=failures)
    state["fail"] = False
    await executor.execute("sometimes", {"x": 2}, CTX, failures=failures)
    state["fail"] = True
    again = await executor.execute("sometimes", {"x": 3}, CTX, failures=failures)
    assert again.hint is None


async def test_validation_failure_is_explained_and_the_tool_not_called() -> None:
    called = False

    @tool
    def typed(n: int) -> int:
        """Typed."""
        nonlocal called
        called = True
        return n

    result = await make(typed).execute("typed", {"n": "lots"}, CTX)
    assert result.error is not None and result.error.type == "validation"
    assert "n:" in result.error.message and not called


async def test_missing_permission_is_refused_before_anything_runs() -> None:
    @tool(side_effect="write")
    def write_it() -> str:
        """Writes."""
        raise AssertionError("must not run")

    viewer = ToolContext(user_id="v", conversation_id="c", trace_id="t", role="viewer",
                         permissions=frozenset({"read"}))
    result = await make(write_it).execute("write_it", {}, viewer)
    assert result.error is not None and result.error.type == "permission"
    assert "viewer" in result.error.message


async def test_unknown_tool_lists_the_valid_names() -> None:
    @tool
    def a() -> str:
        """A."""
        return "a"

    result = await make(a).execute("b", {}, CTX)
    assert result.error is not None and result.error.type == "not_found"
    assert "valid tools: a" in result.error.message


async def test_confirmation_required_raises_the_approval_signal_until_approved() -> None:
    @tool(side_effect="write", requires_confirmation=True)
    def send(to: str) -> str:
        """Sends."""
        return f"sent to {to}"

    executor = make(send)
    with pytest.raises(ApprovalRequired) as sig:
        await executor.execute("send", {"to": "ops"}, CTX)
    assert sig.value.tool_name == "send"
    result = await executor.execute("send", {"to": "ops"}, CTX, approved=True)
    assert result.ok and result.output == "sent to ops"


def test_circuit_breaker_opens_half_opens_and_closes() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures=3, window=10, cooldown=30, clock=clock)
    for _ in range(3):
        assert breaker.allow()
        breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    clock.now += 29
    assert not breaker.allow()
    clock.now += 2
    assert breaker.state == "half_open"
    assert breaker.allow(), "one trial call is let through"
    assert not breaker.allow(), "only one"
    breaker.record_failure()
    assert breaker.state == "open", "a failed trial re-opens"
    clock.now += 31
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow()


def test_failures_outside_the_window_do_not_open_the_breaker() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures=3, window=10, cooldown=30, clock=clock)
    for _ in range(5):
        breaker.record_failure()
        clock.now += 6
    assert breaker.state == "closed"


async def test_breaker_is_shared_across_tasks_and_fails_fast() -> None:
    calls = 0

    @tool(retries=0)
    def down() -> str:
        """Down."""
        nonlocal calls
        calls += 1
        raise ConnectionError("refused")

    clock = Clock()
    executor = make(down, board=BreakerBoard(failures=2, window=60, cooldown=30, clock=clock))
    for _ in range(2):
        await executor.execute("down", {}, CTX, failures=TaskFailures())
    result = await executor.execute("down", {}, CTX, failures=TaskFailures())
    assert result.error is not None and result.error.type == "circuit_open"
    assert calls == 2 and executor.board.states() == {"down": "open"}
    clock.now += 31
    await executor.execute("down", {}, CTX, failures=TaskFailures())
    assert calls == 3, "half-open lets a trial call through"


async def test_secret_in_an_exception_is_redacted() -> None:
    from agent_core.redaction import register

    register(["sk-live-0123456789abcdefSECRET"])

    @tool
    def leaky() -> str:
        """Leaks."""
        raise RuntimeError("auth failed for key sk-live-0123456789abcdefSECRET")

    result = await make(leaky).execute("leaky", {}, CTX)
    assert "SECRET" not in result.observation()
    assert "[REDACTED]" in result.observation()


# --- approvals and audit -------------------------------------------------------------------


@tool(side_effect="write")
def update_crm(note: str) -> str:
    """Writes a note."""
    return "noted"


@tool(tags=["money"])
def refund(amount: float) -> str:
    """Refunds (read-only in form, but it moves money)."""
    return f"refunded {amount}"


SKIP_ADMIN = ApprovalRules(skip_roles=frozenset({"admin"}))
SKIP_CRM = ApprovalRules(skip_tools=frozenset({"update_crm"}))


@pytest.mark.parametrize(("tool_obj", "ctx", "rules", "asks"), [
    (update_crm, CTX, None, True),
    (update_crm, ADMIN, None, True),  # admins too, by default
    (update_crm, ADMIN, SKIP_ADMIN, False),  # unless their role is let through
    (update_crm, CTX, SKIP_ADMIN, True),
    (update_crm, CTX, SKIP_CRM, False),  # or the tool is
    (refund, ADMIN, SKIP_ADMIN, True),  # money always asks
    (refund, CTX, None, True),
])
async def test_who_needs_approval(tool_obj: Any, ctx: ToolContext, rules: Any,
                                  asks: bool) -> None:
    executor = make(tool_obj, rules=rules)
    args = {"note": "x"} if tool_obj is update_crm else {"amount": 5}
    if asks:
        with pytest.raises(ApprovalRequired):
            await executor.execute(tool_obj.name, args, ctx)
    else:
        assert (await executor.execute(tool_obj.name, args, ctx)).ok


async def test_writes_by_users_can_be_allowed_without_approval() -> None:
    executor = make(update_crm, rules=ApprovalRules(writes_need_approval=False))
    assert (await executor.execute("update_crm", {"note": "x"}, CTX)).ok
    with pytest.raises(ApprovalRequired):
        await make(refund, rules=ApprovalRules(writes_need_approval=False)).execute(
            "refund", {"amount": 1}, CTX)


async def test_unattended_runs_refuse_unless_preapproved() -> None:
    unattended = ToolContext(user_id="job", conversation_id="c", trace_id="t",
                             permissions=frozenset({"read", "write"}),
                             extra={"unattended": True})
    result = await make(update_crm).execute("update_crm", {"note": "x"}, unattended)
    assert result.error is not None and result.error.type == "permission"
    assert "unattended" in result.error.message
    allowed = ToolContext(user_id="job", conversation_id="c", trace_id="t",
                          permissions=frozenset({"read", "write"}),
                          extra={"unattended": True, "preapproved_tools": ["update_crm"]})
    assert (await make(update_crm).execute("update_crm", {"note": "x"}, allowed)).ok


async def test_every_write_is_audited_with_requester_and_approver() -> None:
    entries: list[dict[str, Any]] = []

    class Sink:
        async def record(self, entry: dict[str, Any]) -> None:
            entries.append(entry)

    @tool
    def lookup() -> str:
        """Read-only."""
        return "x"

    executor = make(update_crm, lookup, audit=Sink())
    await executor.execute("lookup", {}, CTX)
    await executor.execute("update_crm", {"note": "hello"}, CTX, approved_by="slack:UBOSS")
    [entry] = entries
    assert entry["tool"] == "update_crm" and entry["arguments"] == {"note": "hello"}
    assert entry["requester"] == "u" and entry["approved_by"] == "slack:UBOSS"
    assert entry["ok"] and entry["result"] == "noted"
