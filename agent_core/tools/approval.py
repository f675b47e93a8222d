"""Approval and audit policies of the executor chain.

``ApprovalGate`` decides which calls pause for a human: tools marked requires_confirmation,
tools tagged as touching money or personal data (always), and every write tool, whoever
calls it, admins included (an admin approves their own with one click), unless the
deployment says otherwise for a role or a tool. In an unattended run (a scheduled job)
nobody can be asked, so such a call is refused unless the job pre-approved that tool.

A task that has read private data (a tool tagged ``private``: recall, the files of its
sandbox, what people sent) and then calls a tool tagged ``egress`` (http_fetch) towards a
host outside ``egress_allow`` is one step from sending that data out, which is what a
prompt injection in a fetched page asks for: the call asks a human first (or is refused,
or allowed, as the deployment says).

``AuditTrail`` records every write-tool execution (and every call of a tool tagged money,
personal_data or egress) to an AuditSink.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from ..errors import ApprovalRequired
from .executor import Invocation, Next, ToolResult

log = logging.getLogger(__name__)

ALWAYS_ASK_TAGS = frozenset({"money", "personal_data"})
#: A tool whose results are private data (recall, files); one that sends a request out.
PRIVATE, EGRESS = "private", "egress"
AUDITED_TAGS = ALWAYS_ASK_TAGS | {EGRESS}


@dataclass(frozen=True, slots=True)
class ApprovalRules:
    """When a tool call needs a human's approval."""

    writes_need_approval: bool = True
    #: Roles whose writes run without asking (HERMES_APPROVAL_SKIP_ROLES; none by default).
    skip_roles: frozenset[str] = frozenset()
    #: Write tools that run without asking (HERMES_APPROVAL_SKIP_TOOLS; none by default).
    skip_tools: frozenset[str] = frozenset()
    always_ask_tags: frozenset[str] = field(default=ALWAYS_ASK_TAGS)
    #: Hosts (``*`` patterns) an egress tool may reach after private reads, unasked
    #: (HERMES_FETCH_ALLOW).
    egress_allow: frozenset[str] = frozenset()
    #: An egress elsewhere after private reads: ask a human, refuse it, or allow it.
    egress_after_private: Literal["ask", "refuse", "allow"] = "ask"


class ApprovalGate:
    """Pauses (raises ApprovalRequired for) calls the rules say need approval."""

    def __init__(self, rules: ApprovalRules | None = None) -> None:
        self.rules = rules or ApprovalRules()

    def reason(self, inv: Invocation) -> str | None:
        """Why this call needs approval, or None."""
        tool, ctx = inv.tool, inv.ctx
        tagged = tool.tags & self.rules.always_ask_tags
        if tagged:
            return f"it touches {' and '.join(sorted(t.replace('_', ' ') for t in tagged))}"
        if tool.requires_confirmation:
            return "this tool always asks for confirmation"
        rules = self.rules
        if tool.side_effect == "write" and rules.writes_need_approval \
                and ctx.role not in rules.skip_roles and tool.name not in rules.skip_tools:
            return "write actions need approval"
        return self.egress(inv)

    def egress(self, inv: Invocation) -> str | None:
        """Why this call would send a task's private data out, or None."""
        if EGRESS not in inv.tool.tags or not inv.ctx.private_reads \
                or self.rules.egress_after_private == "allow":
            return None
        url = inv.arguments.get("url")
        host = (urlsplit(url).hostname or "").lower().rstrip(".") if isinstance(url, str) \
            else ""
        if host and any(fnmatchcase(host, p) for p in self.rules.egress_allow):
            return None
        read = ", ".join(sorted(inv.ctx.private_reads))
        return (f"this task has read private data ({read}) and this call would send a "
                f"request to {host or 'an unknown host'!r}, outside HERMES_FETCH_ALLOW")

    async def __call__(self, inv: Invocation, call_next: Next) -> ToolResult:
        reason = self.reason(inv)
        if reason is None or inv.approved:
            return await call_next(inv)
        if self.rules.egress_after_private == "refuse" and reason == self.egress(inv):
            return ToolResult.failure(
                inv.tool.name, inv.call_id, "permission",
                f"{inv.tool.name} refused: {reason}; tell the user, without the data")
        if inv.ctx.extra.get("unattended"):
            if inv.tool.name in inv.ctx.extra.get("preapproved_tools", ()):
                return await call_next(inv)
            return ToolResult.failure(
                inv.tool.name, inv.call_id, "permission",
                f"{inv.tool.name} needs a human approval ({reason}), and this run is "
                "unattended; the job does not pre-approve this tool")
        raise ApprovalRequired(inv.tool.name, inv.arguments, reason)


class AuditSink(Protocol):
    """Where audit entries go (append-only)."""

    async def record(self, entry: dict[str, Any]) -> None:
        """Append one entry."""
        ...


class AuditTrail:
    """Records each executed write (or tagged) tool call with who asked and who approved."""

    def __init__(self, sink: AuditSink) -> None:
        self.sink = sink

    async def __call__(self, inv: Invocation, call_next: Next) -> ToolResult:
        if inv.tool.side_effect != "write" and not inv.tool.tags & AUDITED_TAGS:
            return await call_next(inv)
        started = time.time()
        result = await call_next(inv)
        summary = result.observation()
        entry = {
            "type": "tool_call", "tool": inv.tool.name,
            "arguments": json.loads(json.dumps(inv.arguments, default=str)),
            "ok": result.ok, "result": summary[:500],
            "requester": inv.ctx.user_id, "role": inv.ctx.role,
            "approved_by": inv.extra.get("approved_by"),
            "conversation_id": inv.ctx.conversation_id, "trace_id": inv.ctx.trace_id,
            "task_id": inv.ctx.task_id, "started_at": started, "finished_at": time.time(),
        }
        try:
            await self.sink.record(entry)
        except Exception as exc:  # the audit log must not undo a write that happened
            log.error("could not record the audit entry for %s: %s", inv.tool.name, exc)
        return result
